// The state a checkpoint holds (`bitlab run --checkpoint-every`, docs/results.md
// "Checkpoints"): every object with state between steps lists its members in
// one function, `void state(StateArchive&)`, used both to save and to load, so
// the two can never list different members. The archive is a flat sequence of
// named, typed entries; loading checks each name, type and length against
// what the run being resumed expects and refuses a mismatch (a checkpoint of
// another experiment, or of an older bitlab) naming the entry.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace bitlab {

class StateArchive {
 public:
  // An archive to save into.
  StateArchive() = default;
  // An archive to load from: `bytes` as save_bytes() returned them. `source`
  // names the file in errors.
  StateArchive(std::string bytes, std::string source);

  bool loading() const { return loading_; }
  // What was saved (saving only).
  const std::string& bytes() const { return bytes_; }
  // Throws unless every entry was read (loading only).
  void expect_end() const;

  // Scalars: integers, floating point, bool.
  template <class T>
  requires std::is_arithmetic_v<T>
  void field(std::string_view name, T& value) {
    entry(name, type_code<T>(), sizeof(T), &value, 1, false);
  }
  // A vector whose length the run fixes (the load must find the same length).
  template <class T>
  requires std::is_arithmetic_v<T>
  void field(std::string_view name, std::vector<T>& values) {
    entry(name, type_code<T>(), sizeof(T), values.data(), values.size(), false);
  }
  // A span into storage the run owns (same length on load).
  template <class T>
  requires std::is_arithmetic_v<T>
  void field(std::string_view name, std::span<T> values) {
    entry(name, type_code<T>(), sizeof(T), values.data(), values.size(), false);
  }
  // A vector whose length is part of the state (resized on load).
  template <class T>
  requires std::is_arithmetic_v<T>
  void growing(std::string_view name, std::vector<T>& values);
  void field(std::string_view name, std::string& text);

 private:
  template <class T>
  static constexpr uint8_t type_code() {
    if constexpr (std::is_same_v<T, bool>) return 1;
    if constexpr (std::is_floating_point_v<T>) return static_cast<uint8_t>(16 + sizeof(T));
    if constexpr (std::is_signed_v<T>) return static_cast<uint8_t>(32 + sizeof(T));
    return static_cast<uint8_t>(48 + sizeof(T));
  }
  // Saves or loads one entry of `count` elements of `size` bytes.
  void entry(std::string_view name, uint8_t type, size_t size, void* data, size_t count,
             bool resizable);
  // Loading: reads the next entry's header and checks it; returns its count.
  uint64_t read_header(std::string_view name, uint8_t type, size_t count, bool resizable);
  void read_bytes(void* out, size_t n, std::string_view name);
  [[noreturn]] void mismatch(std::string_view name, const std::string& what) const;

  bool loading_ = false;
  std::string bytes_;
  std::string source_;
  size_t at_ = 0;
};

template <class T>
requires std::is_arithmetic_v<T>
void StateArchive::growing(std::string_view name, std::vector<T>& values) {
  if (loading_) {
    const uint64_t n = read_header(name, type_code<T>(), 0, true);
    values.resize(n);
    read_bytes(values.data(), n * sizeof(T), name);
  } else {
    entry(name, type_code<T>(), sizeof(T), values.data(), values.size(), true);
  }
}

}  // namespace bitlab
