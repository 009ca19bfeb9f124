// The one way bitlab reads JSON from a user (experiment, sweep, cost and
// DeepSpeed files, --set values). Its own header, so that the DeepSpeed
// reader (deepspeed.cpp) needs it and not config.hpp, which stands on
// deepspeed.hpp.
#pragma once

#include <cstddef>
#include <string>

#include "sim/core/schema.hpp"

namespace bitlab {

// Every failure is a ConfigError naming the source: a syntax error as
// "<source>:<line>:<column>: JSON syntax error: ...", a number out of range
// (1e400), nesting deeper than kMaxJsonDepth, a key given twice in one object.
inline constexpr int kMaxJsonDepth = 64;
Json parse_json_text(const std::string& text, const std::string& source);
// Reads and parses a file (a missing or unreadable file, or one longer than
// kMaxJsonFileBytes, is a ConfigError).
inline constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;
Json load_json_file(const std::string& path);

// Whether text is well-formed UTF-8, as a JSON string must be: the JSON
// library's own check (its serializer refuses ill-formed UTF-8).
bool is_valid_utf8(const std::string& text);

}  // namespace bitlab
