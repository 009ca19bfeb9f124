// The option catalogue: every experiment and cluster field, problem,
// optimizer, compressor, error-feedback, network and compute option with its
// type, default, rule and text, and the network presets. `bitlab list` prints
// it and bitlab.list() returns it; it lives here, below both the command line
// and the Python module, so that neither stands on the other.
#pragma once

#include <string>

#include "sim/core/schema.hpp"

namespace bitlab {

// `bitlab list` (text, headed by the version) and `bitlab list --json`.
std::string format_list_options();
Json list_options_json();

}  // namespace bitlab
