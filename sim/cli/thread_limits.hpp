// The cap on `run --threads` and `sweep --jobs` (main.cpp, sweep_command.cpp).
#pragma once

#include <CLI/CLI.hpp>
#include <exception>
#include <string>

namespace bitlab {

// The most OpenMP threads (`run --threads`) or runs at once (`sweep --jobs`)
// a command takes: far past any machine's cores, low enough that a typo
// (4096 on a laptop, which ran for minutes) is refused at once (exit 2).
inline constexpr int kMaxThreads = 1024;
inline CLI::Validator thread_count_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          size_t used = 0;
          const long long n = std::stoll(text, &used);
          if (used == text.size() && n >= 1 && n <= kMaxThreads) return "";
        } catch (const std::exception&) {
        }
        return text + ": must be an integer from 1 to " + std::to_string(kMaxThreads) +
               " (more than the machine's cores only slows a run down)";
      },
      "INT in [1, " + std::to_string(kMaxThreads) + "]");
}

}  // namespace bitlab
