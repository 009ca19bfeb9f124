// Small file helpers shared by the layers that write results folders.
#pragma once

#include <string>

namespace bitlab {

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file.
void write_text_atomic(const std::string& path, const std::string& text);

}  // namespace bitlab
