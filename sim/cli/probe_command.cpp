// `mpirun -np N bitlab probe [--min-bytes 8] [--max-bytes 256M] [--out probe.json]`
// (or `srun ... bitlab probe`): times the exchanges on the user's own machines
// and writes probe.json, which `bitlab calibrate` fits the network model to
// (docs/calibrate.md). Message sizes double from --min-bytes to --max-bytes;
// per size: the four standard collectives (float32 sums, as nccl-tests'
// defaults: sim/comm/mpi_probe.hpp) and bitlab's own compressed collectives
// with a wire format (the 1-bit compressed allreduce, LoCo's flat quantized
// reduce-scatter, the compressed allgather), one worker a rank, within each
// node and across the nodes. Every result is checked against its known
// answer; the table is nccl-tests' (size, count, type, time, algbw, busbw,
// #wrong).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/collectives/compressed_collectives.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/comm/mpi_probe.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/core/files.hpp"
#include "sim/engine/run.hpp"
#include "sim/lab/measurements.hpp"

namespace bitlab {

namespace {

// MPI's counts are int (elements of 4 bytes): 1 GiB keeps every buffer well
// inside them and inside a laptop's memory (all-to-all holds 2 of them).
constexpr int64_t kMaxProbeBytes = int64_t{1} << 30;

// bitlab's compressed collectives with a wire format that run across ranks.
// LoCo's two-stage exchange is not probed yet: when this was written it ran
// in the simulator only (optimizers/loco.cpp refused it under --backend mpi).
constexpr const char* kCompressedCollectives[] = {"onebit_allreduce", "quantized_reduce_scatter",
                                                  "compressed_allgather"};

struct ProbeFlags {
  std::string min_bytes = "8", max_bytes = "256M", cold_bytes = "0";
  ProbeLoop loop;
  int ranks_per_node = 0;
  std::vector<std::string> collectives;
  std::string out = "probe.json";
  bool force = false;
  bool quiet = false;
};

// A size as nccl-tests' -b/-e take it: a whole number with an optional K, M
// or G (powers of 1024).
int64_t parse_size(const std::string& text, const char* flag) {
  size_t used = 0;
  long long v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  int64_t scale = 1;
  if (used > 0 && used + 1 == text.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    scale = u == 'K' ? 1024 : u == 'M' ? 1024 * 1024 : u == 'G' ? 1024 * 1024 * 1024 : 0;
    if (scale) ++used;
  }
  if (used != text.size() || text.empty() || v < 1 || v > kMaxProbeBytes / scale || v * scale < 4) {
    throw ConfigError(std::string(flag) + " " + text +
                          ": must be a whole number of bytes from 4 to 1G, with an optional K, M "
                          "or G (x1024), e.g. 8, 64K, 256M",
                      flag);
  }
  return v * scale;
}

// The flags' one place of validation (before MPI starts, so every rank
// refuses alike).
void check_flags(ProbeFlags& f, int64_t& min_bytes, int64_t& max_bytes) {
  min_bytes = parse_size(f.min_bytes, "--min-bytes");
  max_bytes = parse_size(f.max_bytes, "--max-bytes");
  if (max_bytes < min_bytes)
    throw ConfigError("--max-bytes " + f.max_bytes + ": must be >= --min-bytes " + f.min_bytes,
                      "--max-bytes");
  f.loop.cold_bytes = f.cold_bytes == "0" ? 0 : parse_size(f.cold_bytes, "--cold-bytes");
  if (!(f.loop.max_seconds > 0) || !std::isfinite(f.loop.max_seconds))
    throw ConfigError("--max-seconds " + std::to_string(f.loop.max_seconds) + ": must be > 0",
                      "--max-seconds");
  std::vector<std::string> known(std::begin(kProbeStandardCollectives),
                                 std::end(kProbeStandardCollectives));
  known.insert(known.end(), std::begin(kCompressedCollectives), std::end(kCompressedCollectives));
  if (f.collectives.empty()) f.collectives = known;
  for (const auto& c : f.collectives) {
    if (std::find(known.begin(), known.end(), c) == known.end())
      throw ConfigError("--collectives " + c + ": " + one_of_message(c, known), "--collectives");
  }
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool is_standard(const std::string& c) {
  return std::find(std::begin(kProbeStandardCollectives), std::end(kProbeStandardCollectives), c) !=
         std::end(kProbeStandardCollectives);
}

// One row of the table and of probe.json.
struct ProbeRow {
  std::string level, collective;
  bool compressed = false;
  int nodes = 1, ranks_per_node = 1, instances = 1;
  int64_t bytes = 0, count = 0;
  double wire_bytes_per_rank = 0;  // what one rank puts on the wire per call
  ProbeTiming timing;
  int64_t wrong = 0;
  double algbw_gbytes_per_s() const { return bytes / timing.time_s / 1e9; }
  // nccl-tests' bus bandwidth: algbw times 2(n−1)/n (allreduce) or (n−1)/n
  // (the others), i.e. the bytes one rank sends over the ring or pairwise
  // exchange per second; for a compressed collective, its real wire bytes
  // per rank per second (docs/calibrate.md).
  double busbw_gbytes_per_s() const { return wire_bytes_per_rank / timing.time_s / 1e9; }
};

// ±1, a pattern with no short period, so a chunk sent to the wrong place
// shows.
float pattern_sign(size_t k) {
  return (splitmix64(k) >> 17) & 1 ? 1.0f : -1.0f;
}

// A compressed collective of about `bytes` (float32 elements per worker,
// rounded down to whole chunks so that nothing is padded), one worker a rank
// of the level's transport, timed and checked. Worker w's input is
// (w+1)·s[k] with s the ±1 pattern: every worker's scaled sign or n-bit
// image is then exact (each |value| is its group's maximum), the error
// feedback stays zero from call to call, and the known answer is
// m·s[k] with m = (n+1)/2, the mean of the scales — for the 4-bit quantizer,
// whose positive end is 7/8 of the group's maximum (sim/compress/quantize.hpp:
// q clamps at 2^(b−1)−1 = 7 of 8 steps), 7/8·m where s[k] > 0.
ProbeRow compressed_probe(MpiProbe& probe, ProbeLevel level, const std::string& name,
                          int64_t bytes, const ProbeLoop& loop) {
  Transport& t = probe.transport(level);
  const int n = t.ranks(), w = t.rank();
  const QuantizeSpec spec;  // LoCo's default: 4 bits, groups of 128, nearest rounding
  const size_t unit = name == "onebit_allreduce"           ? onebit_reference_pad_multiple(n)
                      : name == "quantized_reduce_scatter" ? static_cast<size_t>(n) * spec.group_size
                                                           : 1;
  const size_t d = static_cast<size_t>(bytes / 4) / unit * unit;
  ProbeRow row;
  row.collective = name;
  row.compressed = true;
  row.count = static_cast<int64_t>(d);
  row.bytes = row.count * 4;
  if (d == 0) return row;
  Communicator comm(n, &t);
  std::vector<float> input(d), out(d, 0.0f);
  for (size_t k = 0; k < d; ++k) input[k] = static_cast<float>(w + 1) * pattern_sign(k);
  const WorkerBuffers in{input.data(), d, d, n, w, 1};
  const WorkerRange local = comm.local_workers();
  std::optional<OneBitAllreduce> onebit;
  std::optional<QuantizedReduceScatter> quantized;
  std::optional<CompressedAllgatherMean> allgather;
  std::function<void()> call;
  std::vector<CommRecord> plan;
  float positive_factor = 1.0f;
  if (name == "onebit_allreduce") {
    onebit.emplace(n, d, 0, local);
    call = [&] { onebit->run(comm, in, out); };
    plan = OneBitAllreduce::plan(n, d);
  } else if (name == "quantized_reduce_scatter") {
    quantized.emplace(n, d, spec, "fp16", local);
    call = [&] { quantized->run(comm, in, out, 1, 0); };
    plan = QuantizedReduceScatter::plan(n, d, spec, "fp16");
    positive_factor = static_cast<float>((1 << (spec.bits - 1)) - 1) / static_cast<float>(1 << (spec.bits - 1));
  } else {
    auto sign = std::make_shared<SignCompressor>();
    allgather.emplace(n, d, sign, 0, local);
    call = [&] { allgather->run(comm, in, out, 1, 0); };
    plan = CompressedAllgatherMean::plan(n, 0, d, *sign);
  }
  for (const auto& r : plan) row.wire_bytes_per_rank += r.sent_bytes;
  row.timing = probe.time(call, loop);
  // Relative tolerance 1e-3: the quantized reduce-scatter returns its mean
  // in fp16 (11 significant bits: within 2^-11 ≈ 4.9e-4), the others in
  // fp32 from scales computed in double (a few ulps). A wrong sign, a wrong
  // scale or a misplaced chunk is off by 1/8 or more.
  const float m = static_cast<float>(n + 1) / 2.0f;
  int64_t wrong = 0;
  for (size_t k = 0; k < d; ++k) {
    const float want = pattern_sign(k) > 0 ? positive_factor * m : -m;
    wrong += !(std::abs(out[k] - want) <= 1e-3f * std::abs(want));
  }
  row.wrong = probe.sum(wrong);
  return row;
}

std::vector<ProbeLevel> levels_of(const ProbeNodes& nodes) {
  std::vector<ProbeLevel> levels;
  if (nodes.ranks_per_node > 1) levels.push_back(ProbeLevel::kNode);
  if (nodes.nodes > 1) levels.push_back(ProbeLevel::kWorld);
  return levels;
}

std::string human_size(int64_t b) {
  const char* units[] = {"B", "KB", "MB", "GB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return std::to_string(b) + " " + units[u];
}

void print_table_head(const ProbeRow& r) {
  std::printf("#\n# %s level: %s, %s\n", r.level.c_str(), r.collective.c_str(),
              r.level == "node"
                  ? (std::to_string(r.ranks_per_node) + " ranks in each of " +
                     std::to_string(r.instances) + " node(s) at once")
                        .c_str()
                  : (std::to_string(r.nodes) + " nodes x " + std::to_string(r.ranks_per_node) +
                     " ranks")
                        .c_str());
  std::printf("# %10s %12s %8s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time",
              "algbw", "busbw", "#wrong");
  std::printf("# %10s %12s %8s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
}

// nccl-tests' redop column: the reduction, "none" for the collectives that
// only move data; bitlab's compressed collectives average.
const char* redop_of(const ProbeRow& r) {
  if (r.compressed) return "mean";
  return r.collective == "allgather" || r.collective == "alltoall" ? "none" : "sum";
}

void print_row(const ProbeRow& r) {
  std::printf("  %10lld %12lld %8s %6s %10.2f %8.3f %8.3f %7lld\n", static_cast<long long>(r.bytes),
              static_cast<long long>(r.count), "float", redop_of(r),
              1e6 * r.timing.time_s, r.algbw_gbytes_per_s(), r.busbw_gbytes_per_s(),
              static_cast<long long>(r.wrong));
}

Json row_json(const ProbeRow& r) {
  return {{"level", r.level},
          {"collective", r.collective},
          {"compressed", r.compressed},
          {"nodes", r.nodes},
          {"ranks_per_node", r.ranks_per_node},
          {"bytes", r.bytes},
          {"count", r.count},
          {"type", "float"},
          {"wire_bytes_per_rank", r.wire_bytes_per_rank},
          {"iterations", r.timing.iterations},
          {"time_us", 1e6 * r.timing.time_s},
          {"time_us_min_rank", 1e6 * r.timing.min_s},
          {"time_us_max_rank", 1e6 * r.timing.max_s},
          {"algbw_gbytes_per_s", r.algbw_gbytes_per_s()},
          {"busbw_gbytes_per_s", r.busbw_gbytes_per_s()},
          {"wrong", r.wrong}};
}

// The bytes one rank sends per call of a standard collective (nccl-tests'
// busbw factor times its size): the ring's for allreduce, allgather and
// reduce-scatter, the pairwise exchange's for all-to-all (sim/comm/comm.hpp).
double standard_wire_bytes(const std::string& c, int p, int64_t bytes) {
  if (c == "allreduce") return ring_allreduce_cost(p, bytes).sent_bytes;
  if (c == "alltoall") return pairwise_alltoall_cost(p, bytes).sent_bytes;
  return ring_allgather_cost(p, bytes).sent_bytes;
}

// Every size of one collective on one level; rank 0 prints its table.
void probe_collective(MpiProbe& probe, ProbeLevel level, const std::string& c,
                      int64_t min_bytes, int64_t max_bytes, const ProbeFlags& f,
                      std::vector<ProbeRow>& rows) {
  const ProbeNodes& nodes = probe.nodes();
  const bool node = level == ProbeLevel::kNode;
  bool head = false;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    ProbeRow r;
    if (is_standard(c)) {
      const StandardProbe s = probe.standard(level, c, bytes, f.loop);
      r.collective = c;
      r.bytes = s.bytes, r.count = s.count, r.timing = s.timing, r.wrong = s.wrong;
      r.wire_bytes_per_rank = standard_wire_bytes(c, probe.transport(level).ranks(), s.bytes);
    } else {
      r = compressed_probe(probe, level, c, bytes, f.loop);
    }
    if (r.bytes == 0) continue;  // rounds to nothing at this many ranks
    r.level = node ? "node" : "world";
    r.nodes = node ? 1 : nodes.nodes;
    r.ranks_per_node = nodes.ranks_per_node;
    r.instances = node ? nodes.nodes : 1;
    if (probe.rank() == 0) {
      if (!head) print_table_head(r);
      print_row(r);
      std::fflush(stdout);
    }
    head = true;
    rows.push_back(r);
  }
}

Json probe_json(const MpiProbe& probe, const ProbeFlags& f, const std::vector<ProbeRow>& rows) {
  const ProbeNodes& n = probe.nodes();
  Json j;
  j["format"] = kProbeFormat;
  j["bitlab"] = std::string(bitlab_version());
  j["mpi_library"] = probe.library();
  j["ranks"] = probe.ranks();
  j["nodes"] = n.nodes;
  j["ranks_per_node"] = n.ranks_per_node;
  j["node_grouping"] = n.grouping;
  j["hosts"] = n.hosts;
  j["loop"] = {{"iterations", f.loop.iterations},
               {"warmup", f.loop.warmup},
               {"max_seconds", f.loop.max_seconds},
               {"cold_bytes", f.loop.cold_bytes}};
  j["time"] = f.loop.cold_bytes > 0
                  ? "per call: the median over the timed calls of the mean over ranks; each call "
                    "cold (every rank wrote cold_bytes of its memory, then a barrier)"
                  : "per call: the mean over ranks of each rank's mean over the timed calls";
  Json results = Json::array();
  for (const auto& r : rows) results.push_back(row_json(r));
  j["results"] = results;
  return j;
}

int run_probe(ProbeFlags& f) {
  int64_t min_bytes = 0, max_bytes = 0;
  check_flags(f, min_bytes, max_bytes);
  const std::unique_ptr<MpiProbe> probe = make_mpi_probe(f.ranks_per_node);
  const bool talk = probe->rank() == 0;
  // Only rank 0 writes: its view of --out decides, and every rank learns it.
  agree_on_config_errors(probe->transport(ProbeLevel::kWorld), [&] {
    if (talk && std::filesystem::exists(f.out) && !f.force)
      throw ConfigError("--out " + f.out + ": exists; give --force to replace it", "--out");
  });
  const ProbeNodes& nodes = probe->nodes();
  const auto levels = levels_of(nodes);
  if (talk) {
    std::printf("# bitlab probe: %d ranks, %d node(s) x %d ranks (%s), %s\n", probe->ranks(),
                nodes.nodes, nodes.ranks_per_node, nodes.grouping.c_str(), probe->library().c_str());
    std::printf("# %s to %s doubling; %d timed calls a size (fewer past %g s), %d warm-up; time = "
                "%s\n",
                human_size(min_bytes).c_str(), human_size(max_bytes).c_str(), f.loop.iterations,
                f.loop.max_seconds, f.loop.warmup,
                f.loop.cold_bytes > 0
                    ? ("median over calls of the mean over ranks, each call cold (" +
                       human_size(f.loop.cold_bytes) + " written by every rank, then a barrier)")
                          .c_str()
                    : "mean over ranks per call");
    if (nodes.ranks_per_node == 1 && !f.quiet)
      std::fprintf(stderr, "bitlab probe: one rank a node: no node level to time\n");
  }
  std::vector<ProbeRow> rows;
  for (const ProbeLevel level : levels) {
    for (const auto& c : f.collectives) {
      const double t0 = wall_seconds();
      probe_collective(*probe, level, c, min_bytes, max_bytes, f, rows);
      if (talk && !f.quiet)
        std::fprintf(stderr, "bitlab probe: %s level, %s: %s to %s in %.1f s\n",
                     level == ProbeLevel::kNode ? "node" : "world", c.c_str(),
                     human_size(min_bytes).c_str(), human_size(max_bytes).c_str(),
                     wall_seconds() - t0);
    }
  }
  int64_t wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  if (talk) {
    std::printf("#\n# results with a wrong element: %lld\n", static_cast<long long>(wrong));
    write_text_atomic(f.out, probe_json(*probe, f, rows).dump(2) + "\n");
    std::fprintf(stderr, "wrote %s: fit the network model to it with `bitlab calibrate %s`\n",
                 f.out.c_str(), f.out.c_str());
    if (wrong > 0)
      std::fprintf(stderr, "bitlab probe: error: %lld results differ from their known answer "
                   "(#wrong): this MPI is broken, and calibrate refuses such a probe\n",
                   static_cast<long long>(wrong));
  }
  return wrong > 0 ? 1 : 0;
}

}  // namespace

Subcommand add_probe_command(CLI::App& app) {
  auto f = std::make_shared<ProbeFlags>();
  auto* cmd = app.add_subcommand(
      "probe",
      "under mpirun or srun: time the collectives (standard and bitlab's compressed ones) "
      "within each node and across nodes, check every result, write probe.json");
  cmd->footer(
      "Run it under a launcher with at least 2 ranks: mpirun -np 8 bitlab probe, or srun -N 4 "
      "--ntasks-per-node 8 bitlab probe. Then: bitlab calibrate probe.json.\n"
      "Exit status: 0 done; 1 some result was wrong (#wrong > 0); 2 bad input, one rank, or "
      "no MPI in this build. docs/calibrate.md.");
  cmd->add_option("--min-bytes,-b", f->min_bytes, "smallest message (default 8; K, M, G suffixes)");
  cmd->add_option("--max-bytes,-e", f->max_bytes, "largest message (default 256M; at most 1G)");
  cmd->add_option("--iterations,-n", f->loop.iterations, "timed calls a size (default 20)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup,-w", f->loop.warmup, "untimed calls first (default 5)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--max-seconds", f->loop.max_seconds,
                  "time a size for about this long at most: fewer timed calls past it, at least "
                  "one (default 0.5)");
  cmd->add_option("--cold-bytes", f->cold_bytes,
                  "time each call cold: every rank first writes this many bytes of its own "
                  "memory (more than its caches hold), then a barrier; time = the median over "
                  "calls. As training calls its exchanges, after a step's compute (default 0: "
                  "back to back, as nccl-tests; K, M, G suffixes)");
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "emulate nodes of this many consecutive ranks (default 0: the ranks that "
                  "share memory form a node)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--collectives", f->collectives,
                  "which to time (default all): allreduce, allgather, reduce_scatter, alltoall, "
                  "onebit_allreduce, quantized_reduce_scatter, compressed_allgather")
      ->delimiter(',');
  cmd->add_option("--out", f->out, "the probe file to write (default probe.json)");
  cmd->add_flag("--force", f->force, "replace an existing --out");
  cmd->add_flag("--quiet,-q", f->quiet, "no progress on stderr");
  return {cmd, [f] { return run_probe(*f); }};
}

}  // namespace bitlab
