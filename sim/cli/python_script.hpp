// The commands written in Python (`bitlab plot`, `report`, `runs`): each runs
// a script of the repository's notebooks/ folder with Debian's
// /usr/bin/python3 and passes its exit status through. The scripts check their
// input before importing matplotlib or plotly.
#pragma once

#include <string>
#include <vector>

namespace bitlab {

// Runs /usr/bin/python3 notebooks/<script> <args...>; returns its exit status
// (2 after a message when Python or the script is missing; `packages` names
// the Debian packages the script needs, for that message). The script is
// $BITLAB_NOTEBOOKS/<script> when that variable is set, else
// <folder of the bitlab binary>/../notebooks/<script> (the build folder sits
// in the repository).
int run_python_script(const std::string& script, const std::vector<std::string>& args,
                      const std::string& packages);

}  // namespace bitlab
