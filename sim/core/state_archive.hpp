// The state a checkpoint holds (`bitlab run --checkpoint-every`, docs/results.md
// "Checkpoints"): every object with state between steps lists its members in
// one function, `void serialize(StateArchive&)`, used both to save and to load, so
// the two can never list different members. The archive is a flat sequence of
// named, typed entries; loading checks each name, type and length against
// what the run being resumed expects and refuses a mismatch (a checkpoint of
// another experiment, or of an older bitlab) naming the entry.
//
// A file is trusted no further than its own size: every length read is
// checked against the bytes that remain before anything is allocated, so a
// damaged count is refused (ConfigError) rather than allocated. A saved
// archive ends with a seal, a checksum of every byte before it (seal(),
// verify_seal()), so that any damage at all is caught before its values are
// used.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace bitlab {

// 64-bit FNV-1a of `bytes`, continuing from `hash`. It changes whenever any
// single byte does (each step is a bijection of the running hash), which is
// what a checkpoint's seal needs; it is no defence against deliberate forgery.
constexpr uint64_t kFnv1a64Offset = 14695981039346656037ull;
uint64_t fnv1a64(std::string_view bytes, uint64_t hash = kFnv1a64Offset);

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

  // Saving: appends the seal, an entry "checksum" holding fnv1a64 of every
  // byte before its value. Nothing may be saved after it.
  void seal();
  // Loading, before any entry is read: true when the archive ends with a seal
  // that matches its content; the entries then end where the seal begins
  // (expect_end() wants them all read). False for a damaged archive or one
  // saved without a seal; nothing is consumed either way.
  bool verify_seal();

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
  // How many entries follow (a list the caller then saves one by one). On
  // load, a count that many entries could not fit in the rest of the archive
  // is refused, so that the caller may size its list by it.
  void count(std::string_view name, uint64_t& n);

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
  // Saving: an entry's name, type and count (its values follow).
  static std::string header(std::string_view name, uint8_t type, uint64_t count);
  // Loading: reads the next entry's header and checks it (also that its
  // `size`-byte values fit in what is left); returns its count.
  uint64_t read_header(std::string_view name, uint8_t type, size_t size, size_t count,
                       bool resizable);
  void read_bytes(void* out, size_t n, std::string_view name);
  size_t remaining() const { return end_ - at_; }
  [[noreturn]] void mismatch(std::string_view name, const std::string& what) const;
  [[noreturn]] void damaged(std::string_view name, const std::string& what) const;

  bool loading_ = false;
  std::string bytes_;
  std::string source_;
  size_t at_ = 0;
  size_t end_ = 0;  // loading: where the entries end (before the seal, once verified)
};

template <class T>
requires std::is_arithmetic_v<T>
void StateArchive::growing(std::string_view name, std::vector<T>& values) {
  if (loading_) {
    const uint64_t n = read_header(name, type_code<T>(), sizeof(T), 0, true);
    values.resize(n);  // n values fit in the file: read_header checked
    read_bytes(values.data(), n * sizeof(T), name);
  } else {
    entry(name, type_code<T>(), sizeof(T), values.data(), values.size(), true);
  }
}

}  // namespace bitlab
