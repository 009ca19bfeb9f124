#include "sim/core/state_archive.hpp"

#include <cstring>

#include "sim/core/schema.hpp"

namespace bitlab {

// Layout of one entry: name length (u16), name, type code (u8), element
// count (u64), the elements' bytes as this machine stores them (a checkpoint
// is resumed on the machine, or one of the same kind, that wrote it).

StateArchive::StateArchive(std::string bytes, std::string source)
    : loading_(true), bytes_(std::move(bytes)), source_(std::move(source)) {}

void StateArchive::mismatch(std::string_view name, const std::string& what) const {
  throw ConfigError(source_ + ": entry \"" + std::string(name) + "\": " + what +
                    "; the checkpoint was written by another experiment or another version "
                    "of bitlab, so this run cannot resume from it");
}

void StateArchive::read_bytes(void* out, size_t n, std::string_view name) {
  if (n > bytes_.size() - at_) mismatch(name, "the file ends early (truncated)");
  if (n > 0) std::memcpy(out, bytes_.data() + at_, n);
  at_ += n;
}

uint64_t StateArchive::read_header(std::string_view name, uint8_t type, size_t count,
                                   bool resizable) {
  uint16_t len = 0;
  read_bytes(&len, sizeof len, name);
  std::string found(len, '\0');
  read_bytes(found.data(), len, name);
  if (found != name) mismatch(name, "found \"" + found + "\" where it was expected");
  uint8_t found_type = 0;
  read_bytes(&found_type, 1, name);
  if (found_type != type) mismatch(name, "has another type");
  uint64_t n = 0;
  read_bytes(&n, sizeof n, name);
  if (!resizable && n != count) {
    mismatch(name, "holds " + std::to_string(n) + " values, this run has " + std::to_string(count));
  }
  return n;
}

void StateArchive::entry(std::string_view name, uint8_t type, size_t size, void* data, size_t count,
                         bool resizable) {
  if (loading_) {
    const uint64_t n = read_header(name, type, count, resizable);
    read_bytes(data, n * size, name);
    return;
  }
  const auto len = static_cast<uint16_t>(name.size());
  bytes_.append(reinterpret_cast<const char*>(&len), sizeof len);
  bytes_.append(name);
  bytes_.push_back(static_cast<char>(type));
  const uint64_t n = count;
  bytes_.append(reinterpret_cast<const char*>(&n), sizeof n);
  bytes_.append(static_cast<const char*>(data), count * size);
}

void StateArchive::field(std::string_view name, std::string& text) {
  std::vector<char> chars(text.begin(), text.end());
  growing(name, chars);
  if (loading_) text.assign(chars.begin(), chars.end());
}

void StateArchive::expect_end() const {
  if (at_ != bytes_.size()) {
    throw ConfigError(source_ + ": " + std::to_string(bytes_.size() - at_) +
                      " bytes left after the last entry; the checkpoint was written by another "
                      "version of bitlab, so this run cannot resume from it");
  }
}

}  // namespace bitlab
