// `bitlab probe`'s MPI side (mpi_probe.hpp): node grouping, the timing loop,
// and the standard collectives with their known answers. Built only when
// CMake finds MPI, like mpi_transport.cpp; the timing follows nccl-tests
// (src/common.cu: warm-up calls, then a timed loop of back-to-back calls
// whose mean per call is averaged over the ranks), on the CPU with MPI.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/comm/mpi_call.hpp"
#include "sim/comm/mpi_probe.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

namespace {

// The known inputs. Small whole numbers, so that every sum over ranks is
// exact in float32 (below 2^24 for up to 2^18 ranks) and the expected result
// is computed exactly in integers: a wrong, missing or misplaced element is
// counted, never excused by a tolerance. The value depends on the sending
// rank, the element, and for all-to-all the receiving rank, so a block sent
// to or from the wrong place is wrong too.
float summand(int64_t rank, int64_t element) { return static_cast<float>((rank * 7 + element) % 61 + 1); }
float gathered(int64_t from, int64_t to, int64_t element) {
  return static_cast<float>((from * 131 + to * 17 + element) % 1021 + 1);
}
float sum_of_summands(int ranks, int64_t element) {
  int64_t s = 0;
  for (int r = 0; r < ranks; ++r) s += static_cast<int64_t>(summand(r, element));
  return static_cast<float>(s);
}

int to_int(int64_t v) {
  if (v > std::numeric_limits<int>::max())
    throw ConfigError("probe: a message of " + std::to_string(v) +
                      " elements exceeds MPI's int counts: give a smaller --max-bytes");
  return static_cast<int>(v);
}

class MpiProbeImpl final : public MpiProbe {
 public:
  explicit MpiProbeImpl(int ranks_per_node) : world_(make_mpi_transport()) {
    rank_ = world_->rank();
    ranks_ = world_->ranks();
    if (ranks_ < 2) {
      throw ConfigError("probe: a probe needs at least 2 ranks (this one has " +
                            std::to_string(ranks_) +
                            "): start it under a launcher, e.g. mpirun -np 2 bitlab probe, or "
                            "srun -N 2 --ntasks-per-node 8 bitlab probe",
                        "ranks");
    }
    group(ranks_per_node);
    check_mpi(MPI_Comm_split(MPI_COMM_WORLD, nodes_.node, nodes_.node_rank, &node_comm_),
          "MPI_Comm_split");
    node_ = world_->split(nodes_.node, nodes_.node_rank);
  }
  ~MpiProbeImpl() override {
    node_.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  }

  int rank() const override { return rank_; }
  int ranks() const override { return ranks_; }
  const ProbeNodes& nodes() const override { return nodes_; }
  std::string library() const override {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(text, &length);
    std::string s(text, static_cast<size_t>(std::max(length, 0)));
    const auto end = s.find_first_of("\n,");
    return s.substr(0, end);
  }
  Transport& transport(ProbeLevel level) override {
    return level == ProbeLevel::kNode ? *node_ : *world_;
  }
  ProbeTiming time(const std::function<void()>& call, const ProbeLoop& loop,
                   const std::function<void()>& prepare) override;
  StandardProbe standard(ProbeLevel level, const std::string& collective, int64_t bytes,
                         const ProbeLoop& loop) override;
  int64_t sum(int64_t value) override {
    long long in = value, out = 0;
    check_mpi(MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }

 private:
  double world_max(double v) {
    double out = v;
    check_mpi(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }
  // The warm-up calls; returns how many calls to time (fewer past
  // loop.max_seconds, the same on every rank).
  int warm_up(const std::function<void()>& call, const ProbeLoop& loop);
  ProbeTiming time_cold(const std::function<void()>& call, const std::function<void()>& prepare,
                        const ProbeLoop& loop, int iterations);
  std::vector<unsigned char> cold_;  // what a cold call's rank writes first
  void group(int ranks_per_node);
  std::vector<std::string> host_names();

  std::unique_ptr<Transport> world_;
  std::unique_ptr<Transport> node_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  int rank_ = 0, ranks_ = 1;
  ProbeNodes nodes_;
};

// Every rank's host name, in world rank order.
std::vector<std::string> MpiProbeImpl::host_names() {
  char mine[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(mine, &length);
  std::vector<char> all(static_cast<size_t>(ranks_) * MPI_MAX_PROCESSOR_NAME);
  check_mpi(MPI_Allgather(mine, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                      MPI_CHAR, MPI_COMM_WORLD),
        "MPI_Allgather");
  std::vector<std::string> names;
  for (int r = 0; r < ranks_; ++r) {
    const char* s = all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME;
    names.emplace_back(s, strnlen(s, MPI_MAX_PROCESSOR_NAME));
  }
  return names;
}

void MpiProbeImpl::group(int ranks_per_node) {
  const std::vector<std::string> hosts = host_names();
  std::vector<int> leader_of(static_cast<size_t>(ranks_));  // each rank's node's first rank
  if (ranks_per_node > 0) {
    if (ranks_ % ranks_per_node != 0) {
      throw ConfigError("--ranks-per-node " + std::to_string(ranks_per_node) +
                            ": must divide the ranks (" + std::to_string(ranks_) +
                            ") so that every emulated node holds as many",
                        "--ranks-per-node");
    }
    for (int r = 0; r < ranks_; ++r) leader_of[r] = r / ranks_per_node * ranks_per_node;
    nodes_.grouping = "emulated: blocks of " + std::to_string(ranks_per_node) +
                      " consecutive ranks (--ranks-per-node)";
  } else {
    MPI_Comm shm = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &shm),
          "MPI_Comm_split_type");
    int leader = rank_;
    check_mpi(MPI_Bcast(&leader, 1, MPI_INT, 0, shm), "MPI_Bcast");
    MPI_Comm_free(&shm);
    check_mpi(MPI_Allgather(&leader, 1, MPI_INT, leader_of.data(), 1, MPI_INT, MPI_COMM_WORLD),
          "MPI_Allgather");
    nodes_.grouping = "ranks that share memory (MPI_Comm_split_type)";
  }
  std::vector<int> leaders = leader_of;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  nodes_.nodes = static_cast<int>(leaders.size());
  nodes_.node = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), leader_of[rank_]) -
                                 leaders.begin());
  std::vector<int> size(leaders.size(), 0);
  for (int r = 0; r < ranks_; ++r) {
    const auto k = std::lower_bound(leaders.begin(), leaders.end(), leader_of[r]) - leaders.begin();
    if (r < rank_ && leader_of[r] == leader_of[rank_]) ++nodes_.node_rank;
    ++size[static_cast<size_t>(k)];
  }
  for (size_t k = 0; k < leaders.size(); ++k) {
    nodes_.hosts.push_back(hosts[static_cast<size_t>(leaders[k])]);
    if (size[k] != size[0]) {
      throw ConfigError("probe: node " + hosts[static_cast<size_t>(leaders[k])] + " holds " +
                            std::to_string(size[k]) + " ranks and node " + hosts[leaders[0]] +
                            " holds " + std::to_string(size[0]) +
                            ": every node must hold the same number (e.g. srun "
                            "--ntasks-per-node, mpirun --map-by ppr:N:node)",
                        "ranks");
    }
  }
  nodes_.ranks_per_node = size[0];
}

ProbeTiming MpiProbeImpl::time(const std::function<void()>& call, const ProbeLoop& loop,
                               const std::function<void()>& prepare) {
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  const int iterations = warm_up(call, loop);
  check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  if (loop.cold_bytes > 0) return time_cold(call, prepare, loop, iterations);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iterations; ++i) call();
  double mine = (MPI_Wtime() - t0) / iterations;
  ProbeTiming t;
  t.iterations = iterations;
  check_mpi(MPI_Allreduce(&mine, &t.time_s, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  t.time_s /= ranks_;
  check_mpi(MPI_Allreduce(&mine, &t.min_s, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&mine, &t.max_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return t;
}

int MpiProbeImpl::warm_up(const std::function<void()>& call, const ProbeLoop& loop) {
  // Warm-up, cut short once a quarter of the time allowed is spent (agreed:
  // every rank takes the same decision from the slowest rank's time).
  double warm_s = 0;
  int warmed = 0;
  for (int w = 0; w < loop.warmup; ++w) {
    const double t0 = MPI_Wtime();
    call();
    warm_s += MPI_Wtime() - t0;
    ++warmed;
    if (world_max(warm_s) > loop.max_seconds / 4) break;
  }
  int iterations = loop.iterations;
  if (warmed > 0) {
    const double per_call = world_max(warm_s) / warmed;
    if (per_call > 0) {
      const double fits = std::floor(loop.max_seconds / per_call);
      iterations = static_cast<int>(std::clamp(fits, 1.0, static_cast<double>(loop.iterations)));
    }
  }
  return iterations;
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

ProbeTiming MpiProbeImpl::time_cold(const std::function<void()>& call,
                                    const std::function<void()>& prepare, const ProbeLoop& loop,
                                    int iterations) {
  // Each call after this rank has written loop.cold_bytes of its own (the
  // values change every call, so no write can be skipped), then its input
  // (prepare), and every rank has met at a barrier; timed alone.
  cold_.resize(static_cast<size_t>(loop.cold_bytes));
  std::vector<double> mine(static_cast<size_t>(iterations));
  for (int i = 0; i < iterations; ++i) {
    std::memset(cold_.data(), i & 0xff, cold_.size());
    if (prepare) prepare();
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    const double t0 = MPI_Wtime();
    call();
    mine[static_cast<size_t>(i)] = MPI_Wtime() - t0;
  }
  std::vector<double> over_ranks(mine.size());
  check_mpi(MPI_Allreduce(mine.data(), over_ranks.data(), iterations, MPI_DOUBLE, MPI_SUM,
                      MPI_COMM_WORLD),
        "MPI_Allreduce");
  for (double& v : over_ranks) v /= ranks_;
  ProbeTiming t;
  t.iterations = iterations;
  t.time_s = median_of(over_ranks);
  const double my_median = median_of(mine);
  t.min_s = my_median, t.max_s = my_median;
  check_mpi(MPI_Allreduce(&my_median, &t.min_s, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&my_median, &t.max_s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return t;
}

StandardProbe MpiProbeImpl::standard(ProbeLevel level, const std::string& collective,
                                     int64_t bytes, const ProbeLoop& loop) {
  MPI_Comm comm = level == ProbeLevel::kNode ? node_comm_ : MPI_COMM_WORLD;
  int p = 1, q = 0;
  MPI_Comm_size(comm, &p);
  MPI_Comm_rank(comm, &q);
  const int64_t elements = bytes / 4;
  // nccl-tests' rounding: allreduce any whole count; the others the same
  // whole count from (or to) every rank.
  const int64_t block = collective == "allreduce" ? elements : elements / p;
  StandardProbe out;
  out.count = collective == "allreduce" ? block : block * p;
  out.bytes = out.count * 4;
  if (block == 0) return out;
  const int n = to_int(block);
  std::vector<float> send, recv;
  std::function<void()> call;
  if (collective == "allreduce") {
    send.resize(block), recv.assign(block, 0.0f);
    for (int64_t i = 0; i < block; ++i) send[i] = summand(q, i);
    call = [&] { check_mpi(MPI_Allreduce(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce"); };
  } else if (collective == "allgather") {
    send.resize(block), recv.assign(block * p, 0.0f);
    for (int64_t i = 0; i < block; ++i) send[i] = gathered(q, 0, i);
    call = [&] { check_mpi(MPI_Allgather(send.data(), n, MPI_FLOAT, recv.data(), n, MPI_FLOAT, comm), "MPI_Allgather"); };
  } else if (collective == "reduce_scatter") {
    send.resize(block * p), recv.assign(block, 0.0f);
    for (int64_t i = 0; i < block * p; ++i) send[i] = summand(q, i);
    call = [&] { check_mpi(MPI_Reduce_scatter_block(send.data(), recv.data(), n, MPI_FLOAT, MPI_SUM, comm), "MPI_Reduce_scatter_block"); };
  } else if (collective == "alltoall") {
    send.resize(block * p), recv.assign(block * p, 0.0f);
    for (int to = 0; to < p; ++to)
      for (int64_t i = 0; i < block; ++i) send[to * block + i] = gathered(q, to, i);
    call = [&] { check_mpi(MPI_Alltoall(send.data(), n, MPI_FLOAT, recv.data(), n, MPI_FLOAT, comm), "MPI_Alltoall"); };
  } else {
    throw std::logic_error("probe: unknown standard collective " + collective);
  }
  // Cold calls: the input written afresh before each (the same values); a
  // copy kept for that alone (back to back, none: up to 1 GB a buffer).
  std::vector<float> input;
  if (loop.cold_bytes > 0) input = send;
  out.timing = time(call, loop, [&] { std::copy(input.begin(), input.end(), send.begin()); });
  // The known answer, element by element, after the last timed call.
  int64_t wrong = 0;
  for (int64_t k = 0; k < static_cast<int64_t>(recv.size()); ++k) {
    const int64_t from = k / block, i = k % block;
    const float want = collective == "allreduce"        ? sum_of_summands(p, k)
                       : collective == "reduce_scatter" ? sum_of_summands(p, q * block + k)
                       : collective == "allgather"      ? gathered(from, 0, i)
                                                        : gathered(from, q, i);
    wrong += recv[k] != want;
  }
  out.wrong = sum(wrong);
  return out;
}

}  // namespace

std::unique_ptr<MpiProbe> make_mpi_probe(int ranks_per_node) {
  return std::make_unique<MpiProbeImpl>(ranks_per_node);
}

}  // namespace bitlab
