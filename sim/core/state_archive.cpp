#include "sim/core/state_archive.hpp"

#include <nlohmann/json.hpp>

#include <cstring>

#include "sim/core/schema.hpp"

namespace bitlab {

// Layout of one entry: name length (u16), name, type code (u8), element
// count (u64), the elements' bytes as this machine stores them (a checkpoint
// is resumed on the machine, or one of the same kind, that wrote it). The
// seal is the last entry: "checksum", one u64.

namespace {

constexpr std::string_view kSealName = "checksum";
constexpr uint8_t kSealType = 48 + sizeof(uint64_t);
// The smallest entry: an empty name and no values.
constexpr size_t kMinEntryBytes = sizeof(uint16_t) + 1 + sizeof(uint64_t);

}  // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t hash) {
  constexpr uint64_t kPrime = 1099511628211ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= kPrime;
  }
  return hash;
}

StateArchive::StateArchive(std::string bytes, std::string source)
    : loading_(true), bytes_(std::move(bytes)), source_(std::move(source)), end_(bytes_.size()) {}

void StateArchive::mismatch(std::string_view name, const std::string& what) const {
  throw ConfigError(source_ + ": entry \"" + std::string(name) + "\": " + what +
                    "; the checkpoint was written by another experiment or another version "
                    "of bitlab, so this run cannot resume from it");
}

void StateArchive::damaged(std::string_view name, const std::string& what) const {
  throw ConfigError(source_ + ": entry \"" + std::string(name) + "\": " + what +
                    " (the file is damaged); cannot resume from it");
}

void StateArchive::read_bytes(void* out, size_t n, std::string_view name) {
  if (n > remaining()) mismatch(name, "the file ends early (truncated)");
  if (n > 0) std::memcpy(out, bytes_.data() + at_, n);
  at_ += n;
}

uint64_t StateArchive::read_header(std::string_view name, uint8_t type, size_t size, size_t count,
                                   bool resizable) {
  uint16_t len = 0;
  read_bytes(&len, sizeof len, name);
  if (len > remaining()) mismatch(name, "the file ends early (truncated)");
  std::string found(len, '\0');
  read_bytes(found.data(), len, name);
  if (found != name) mismatch(name, "found \"" + found + "\" where it was expected");
  uint8_t found_type = 0;
  read_bytes(&found_type, 1, name);
  if (found_type != type) mismatch(name, "has another type");
  uint64_t n = 0;
  read_bytes(&n, sizeof n, name);
  // Checked before the caller multiplies or allocates by it: a damaged count
  // must not become an allocation of exabytes (or wrap around to a small one).
  if (n > remaining() / size) {
    damaged(name, "holds " + std::to_string(n) + " values of " + std::to_string(size) +
                      " bytes, but only " + std::to_string(remaining()) + " bytes are left");
  }
  if (!resizable && n != count) {
    mismatch(name, "holds " + std::to_string(n) + " values, this run has " + std::to_string(count));
  }
  return n;
}

std::string StateArchive::header(std::string_view name, uint8_t type, uint64_t count) {
  std::string out;
  const auto len = static_cast<uint16_t>(name.size());
  out.append(reinterpret_cast<const char*>(&len), sizeof len);
  out.append(name);
  out.push_back(static_cast<char>(type));
  out.append(reinterpret_cast<const char*>(&count), sizeof count);
  return out;
}

void StateArchive::entry(std::string_view name, uint8_t type, size_t size, void* data, size_t count,
                         bool resizable) {
  if (loading_) {
    const uint64_t n = read_header(name, type, size, count, resizable);
    read_bytes(data, n * size, name);
    return;
  }
  bytes_ += header(name, type, count);
  bytes_.append(static_cast<const char*>(data), count * size);
}

void StateArchive::field(std::string_view name, std::string& text) {
  std::vector<char> chars(text.begin(), text.end());
  growing(name, chars);
  if (!loading_) return;
  text.assign(chars.begin(), chars.end());
  // Every text saved is UTF-8 (phase names, warnings): a byte that is not
  // would fail later, in summary.json's serializer, as a write error (exit 4;
  // found by tests/fuzz/mutate.py, regression/checkpoint/text-not-utf8).
  try {
    (void)nlohmann::json(text).dump();
  } catch (const nlohmann::json::type_error&) {
    damaged(name, "text that is not UTF-8");
  }
}

void StateArchive::count(std::string_view name, uint64_t& n) {
  field(name, n);
  if (loading_ && n > remaining() / kMinEntryBytes) {
    damaged(name, "counts " + std::to_string(n) + " entries, more than the " +
                      std::to_string(remaining()) + " bytes left can hold");
  }
}

void StateArchive::seal() {
  bytes_ += header(kSealName, kSealType, 1);
  const uint64_t sum = fnv1a64(bytes_);
  bytes_.append(reinterpret_cast<const char*>(&sum), sizeof sum);
}

bool StateArchive::verify_seal() {
  const std::string head = header(kSealName, kSealType, 1);
  const size_t seal_bytes = head.size() + sizeof(uint64_t);
  if (!loading_ || bytes_.size() < at_ + seal_bytes) return false;
  const size_t start = bytes_.size() - seal_bytes;
  if (bytes_.compare(start, head.size(), head) != 0) return false;
  uint64_t stored = 0;
  std::memcpy(&stored, bytes_.data() + start + head.size(), sizeof stored);
  if (fnv1a64(std::string_view(bytes_).substr(0, start + head.size())) != stored) return false;
  end_ = start;
  return true;
}

void StateArchive::expect_end() const {
  if (at_ != end_) {
    throw ConfigError(source_ + ": " + std::to_string(end_ - at_) +
                      " bytes left after the last entry; the checkpoint was written by another "
                      "version of bitlab, so this run cannot resume from it");
  }
}

}  // namespace bitlab
