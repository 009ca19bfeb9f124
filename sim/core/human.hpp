// Numbers for people: byte counts in decimal units (kB, MB, GB, TB, PB: steps
// of 10^3, GB = 10^9 bytes as docs/design.md defines it) and durations in
// ms, s, min, h, days. Used by the human summaries (`bitlab run`, `cost`,
// `recost`); the machine-readable outputs (csv, json) keep raw numbers.
#pragma once

#include <string>

namespace bitlab {

// "812 B", "23.6 MB", "1.18 PB": three significant digits, never an exponent.
std::string human_bytes(double bytes);

// "0.586 ms", "12.3 s", "4.20 min", "3.05 h", "2.10 days".
std::string human_duration(double seconds);

}  // namespace bitlab
