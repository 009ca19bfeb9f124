// The input format shared by the libFuzzer harnesses and by replay.py, which
// hands the same bytes to the real binary: a JSON document, then zero or more
// `--set` assignments, each after a NUL byte (a command-line argument can hold
// anything but NUL):
//
//   {"steps": 3, ...}\0optimizer.lr=0.1\0seed=2
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bitlab::fuzz {

struct Input {
  std::string text;               // the file
  std::vector<std::string> sets;  // each as `--set` would pass it
};

inline Input split_input(const uint8_t* data, size_t size) {
  Input in;
  const std::string all(reinterpret_cast<const char*>(data), size);
  size_t start = all.find('\0');
  in.text = all.substr(0, start);
  while (start != std::string::npos) {
    const size_t next = all.find('\0', start + 1);
    in.sets.push_back(all.substr(start + 1, next == std::string::npos ? next : next - start - 1));
    start = next;
  }
  return in;
}

}  // namespace bitlab::fuzz
