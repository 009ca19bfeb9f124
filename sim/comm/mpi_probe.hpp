// What `bitlab probe` (sim/cli/probe_command.cpp) needs of MPI: the ranks
// grouped into nodes, the timing loop every rank runs in step, and the four
// standard collectives (allreduce, allgather, reduce-scatter, all-to-all of
// float32 sums, as nccl-tests' defaults) timed and checked against their
// known answer. The implementation (mpi_probe.cpp) is the only probe file
// that includes <mpi.h> and is built only with MPI; without it
// make_mpi_probe() refuses with exit 2 (mpi_probe_unavailable.cpp).
// docs/calibrate.md describes the command and probe.json.
//
// Levels. "node": the ranks of each node run the collective among
// themselves, every node at once (what a one-node nccl-tests run on each
// node measures); "world": every rank, across the nodes. Nodes are the ranks
// that share memory (MPI_Comm_split_type), or blocks of `ranks_per_node`
// consecutive ranks when a probe emulates nodes on one machine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/comm/transport.hpp"

namespace bitlab {

enum class ProbeLevel { kNode, kWorld };

// How long each (collective, size) is timed: `warmup` calls first, then
// `iterations` timed calls — fewer once `max_seconds` would pass (at least
// one), so that 256 MB on a slow link ends in reasonable time. Every rank
// uses the same count (agreed over all ranks).
//
// Cold calls (`cold_bytes` > 0): before each timed call every rank writes
// that many bytes of its own memory, then all meet at a barrier, and the
// call is timed alone. Training calls its exchanges so: after a step's
// compute has filled the caches with other data, the ranks arriving
// together once waiting is taken apart (run --barrier-before-exchanges).
// Back-to-back calls (the default, nccl-tests' way) find their buffers and
// MPI's shared-memory segments in cache: on a 2-rank Open MPI probe of this
// project's 2-core machine a 128 KB all-to-all took 8.7 µs back to back,
// 14.9 µs after 1 MB was written and 19.4 µs after 16 MB (docs/calibrate.md).
struct ProbeLoop {
  int iterations = 20;
  int warmup = 5;
  double max_seconds = 0.5;
  int64_t cold_bytes = 0;
};

// One timed collective, per call: the mean over the ranks of each rank's
// mean time over the timed calls (nccl-tests' default report, -a 1), and
// the fastest and slowest rank's. Cold calls: the median over the calls of
// the mean over the ranks (a descheduled rank or a page fault makes a few
// calls slow; training's check compares medians of steps), and the fastest
// and slowest rank's median.
struct ProbeTiming {
  double time_s = 0, min_s = 0, max_s = 0;
  int iterations = 0;
};

struct ProbeNodes {
  int nodes = 1;
  int ranks_per_node = 1;
  int node = 0;       // this rank's node
  int node_rank = 0;  // its place there
  std::string grouping;            // how nodes were found, for the report
  std::vector<std::string> hosts;  // per node: its first rank's host name
};

// One standard collective of about `bytes`: the size nccl-tests reports
// (allreduce: one rank's buffer; allgather, reduce-scatter: the total;
// all-to-all: what one rank sends in all), rounded down as nccl-tests rounds
// it (whole float32 elements, the same number from each rank); count = its
// float32 elements; wrong = elements that differ from the known answer,
// summed over every rank. bytes = 0: the size rounds to nothing (not timed).
struct StandardProbe {
  int64_t bytes = 0;
  int64_t count = 0;
  int64_t wrong = 0;
  ProbeTiming timing;
};

inline constexpr const char* kProbeStandardCollectives[] = {"allreduce", "allgather",
                                                            "reduce_scatter", "alltoall"};

class MpiProbe {
 public:
  virtual ~MpiProbe() = default;
  virtual int rank() const = 0;
  virtual int ranks() const = 0;
  virtual const ProbeNodes& nodes() const = 0;
  // The MPI library's name and version (MPI_Get_library_version, first line).
  virtual std::string library() const = 0;
  // The byte transport of a level (node: this rank's node): what bitlab's
  // compressed collectives run over (a Communicator with one worker a rank).
  virtual Transport& transport(ProbeLevel level) = 0;
  // Times `call` (one collective on some level): every rank calls time()
  // together. The warm-up and the timed calls start after a barrier of all
  // ranks, so every node's instance of a node-level collective runs at once.
  // Cold calls: `prepare` (if any) runs before each call's barrier, untimed:
  // a standard collective writes its input there afresh, as training's
  // exchanges send what was just computed.
  virtual ProbeTiming time(const std::function<void()>& call, const ProbeLoop& loop,
                           const std::function<void()>& prepare = {}) = 0;
  // A standard collective (kProbeStandardCollectives) timed and checked.
  virtual StandardProbe standard(ProbeLevel level, const std::string& collective, int64_t bytes,
                                 const ProbeLoop& loop) = 0;
  // Sum over every rank (wrong-element counts).
  virtual int64_t sum(int64_t value) = 0;
};

// Initialises MPI and groups the ranks: ranks_per_node 0 by shared memory,
// else blocks of that many ranks (it must divide the ranks). Throws
// ConfigError (exit 2) without MPI in the build, on a single rank, and when
// nodes hold different numbers of ranks.
std::unique_ptr<MpiProbe> make_mpi_probe(int ranks_per_node);

}  // namespace bitlab
