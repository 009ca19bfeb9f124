// The input format of fuzz_checkpoint and of replay.py's "checkpoint" kind: a
// mode byte, then the bytes of a checkpoint.bin.
//
//   mode & 1 == 0: the bytes are the file as they stand (a random change is
//                  almost always caught by the seal: this reaches the seal);
//   mode & 1 == 1: the bytes are the file's entries without their seal, and
//                  a valid seal is appended (this reaches every entry's
//                  checks behind the seal: counts, lengths, names, values).
//
// The run the checkpoint belongs to is tests/fuzz/checkpoint_experiment.json,
// run with --checkpoint-every 4 (a checkpoint at step 4 of 8) and its
// summary.json removed, as if killed after that checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/core/state_archive.hpp"

namespace bitlab::fuzz {

inline std::string checkpoint_bytes(const uint8_t* data, size_t size) {
  if (size == 0) return "";
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) return bytes;
  // The seal of StateArchive::seal(): its header, then fnv1a64 of every byte
  // up to and including that header.
  StateArchive empty;
  empty.seal();
  bytes += empty.bytes().substr(0, empty.bytes().size() - sizeof(uint64_t));
  const uint64_t sum = fnv1a64(bytes);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return bytes;
}

}  // namespace bitlab::fuzz
