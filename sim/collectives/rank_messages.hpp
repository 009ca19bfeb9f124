// The compressed collectives' messages across ranks (the MPI backend): each
// (worker, server) or worker message is encoded by the rank that holds its
// sender and decoded by the ranks that need it, exactly as the simulator
// decodes. Shared by compressed_collectives.cpp and onebit_allreduce.cpp; on
// one rank these are never called (nothing moves).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sim/comm/comm.hpp"

namespace bitlab {

// Counts and displacements of `parts` equal blocks of `block` bytes, laid
// end to end (the allgathers' layout), in the communicator's staging.
inline std::pair<std::span<int64_t>, std::span<int64_t>> equal_blocks(Communicator& comm,
                                                                      int parts, int64_t block) {
  const std::span<int64_t> counts = comm.staging<int64_t>(Communicator::Staging::kCounts, parts);
  const std::span<int64_t> displs = comm.staging<int64_t>(Communicator::Staging::kDispls, parts);
  for (int q = 0; q < parts; ++q) {
    counts[q] = block;
    displs[q] = q * block;
  }
  return {counts, displs};
}

// Alltoall: worker i's message for server r goes to r's owner. Rank p sends
// rank q the messages of its b workers for q's b servers (b² units, worker-
// major); its own block stays in place (never encoded, never sent).
template <class Encode, class Decode>
void alltoall_messages(Communicator& comm, int64_t unit, Encode&& encode, Decode&& decode) {
  const int ranks = comm.ranks(), me = comm.rank();
  const WorkerRange mine = comm.local_workers();
  const int64_t b = mine.size(), block = b * b * unit;
  const auto [counts, displs] = equal_blocks(comm, ranks, block);
  counts[me] = 0;  // its own block stays in place
  const std::span<uint8_t> send =
      comm.staging<uint8_t>(Communicator::Staging::kSend, static_cast<size_t>(block * ranks));
  const std::span<uint8_t> recv = comm.staging<uint8_t>(Communicator::Staging::kRecv, send.size());
  for (int q = 0; q < ranks; ++q) {
    if (q == me) continue;
    uint8_t* dst = send.data() + displs[q];
    for (int i = mine.begin; i < mine.end; ++i) {
      for (int r = q * static_cast<int>(b); r < (q + 1) * b; ++r, dst += unit) encode(i, r, dst);
    }
  }
  comm.transport().alltoallv(send.data(), counts, displs, recv.data(), counts, displs);
  for (int q = 0; q < ranks; ++q) {
    if (q == me) continue;
    const uint8_t* src = recv.data() + displs[q];
    for (int i = q * static_cast<int>(b); i < (q + 1) * b; ++i) {
      for (int r = mine.begin; r < mine.end; ++r, src += unit) decode(i, r, src);
    }
  }
}

// Allgather: the message of every worker (or server) u reaches every rank;
// u's owner encodes it, the other ranks decode it (or read it later from
// `buf`, where u's message lies at u·unit).
template <class Encode, class Decode>
void allgather_messages(Communicator& comm, int64_t unit, std::vector<uint8_t>& buf,
                        Encode&& encode, Decode&& decode) {
  const int ranks = comm.ranks();
  const WorkerRange mine = comm.local_workers();
  const int64_t block = mine.size() * unit;
  const auto [counts, displs] = equal_blocks(comm, ranks, block);
  // Grown once, then reused.
  if (buf.size() < static_cast<size_t>(block * ranks))
    buf.resize(static_cast<size_t>(block * ranks));
  for (int u = mine.begin; u < mine.end; ++u) encode(u, buf.data() + u * unit);
  comm.transport().allgatherv(buf.data(), counts, displs);
  for (int u = 0; u < comm.workers(); ++u) {
    if (u < mine.begin || u >= mine.end) decode(u, buf.data() + u * unit);
  }
}

}  // namespace bitlab
