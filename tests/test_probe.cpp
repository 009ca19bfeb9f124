// `bitlab probe` (sim/cli/probe_command.cpp, sim/comm/mpi_probe.*): under
// mpirun it times every collective over a small size range, checks every
// result (#wrong 0), writes a valid probe.json that `bitlab calibrate` turns
// into a network file `bitlab cost` prices with; one rank, bad flags and a
// build without MPI are refused with exit 2. Sizes stay small (8 B-64 KB) so
// the suite adds a few seconds to CI.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using namespace bitlab::testing;

namespace {

[[maybe_unused]] const char* kAllCollectives[] = {
    "allreduce",        "allgather",           "reduce_scatter",          "alltoall",
    "onebit_allreduce", "compressed_allgather", "quantized_reduce_scatter"};

#ifdef BITLAB_MPIEXEC
// `mpirun -np RANKS bitlab probe ARGS`, loopback and oversubscribed (CI has
// 2 cores): ranks yield instead of busy-polling, one OpenMP thread each.
Result probe_under_mpirun(const TempDir& dir, int ranks, const std::string& args) {
  return run_shell(dir, std::string("OMP_NUM_THREADS=1 ") + BITLAB_MPIEXEC +
                            " --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np " +
                            std::to_string(ranks) + " " + BITLAB_BINARY + " probe " + args);
}

// The table's data rows (lines not starting with '#'), split into cells.
std::vector<std::vector<std::string>> table_rows(const std::string& out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.find_first_not_of(' ') == std::string::npos || line[0] == '#') continue;
    std::istringstream cells(line);
    std::vector<std::string> row;
    for (std::string c; cells >> c;) row.push_back(c);
    rows.push_back(row);
  }
  return rows;
}

// probe.json's results: every collective at `level`, #wrong 0, times > 0.
void check_probe_file(const nlohmann::json& j, const std::string& level, int nodes,
                      int ranks_per_node) {
  CHECK(j.at("format") == "bitlab-probe-1");
  std::set<std::string> seen;
  for (const auto& r : j.at("results")) {
    if (r.at("level") != level) continue;
    CAPTURE(r.dump());
    seen.insert(r.at("collective").get<std::string>());
    CHECK(r.at("wrong") == 0);
    CHECK(r.at("time_us").get<double>() > 0);
    CHECK(r.at("bytes").get<int64_t>() > 0);
    CHECK(r.at("nodes") == nodes);
    CHECK(r.at("ranks_per_node") == ranks_per_node);
    CHECK(r.at("busbw_gbytes_per_s").get<double>() > 0);
  }
  CHECK(seen == std::set<std::string>(std::begin(kAllCollectives), std::end(kAllCollectives)));
}
#endif

}  // namespace

TEST_SUITE("probe") {
  TEST_CASE("bad flags are refused before MPI starts (exit 2, naming the flag and rule)") {
    TempDir dir;
    Result r = run_bitlab(dir, "probe --min-bytes 3");
    CHECK(r.status == 2);
    CHECK(r.err.find("--min-bytes 3: must be a whole number of bytes from 4 to 1G") != std::string::npos);
    r = run_bitlab(dir, "probe --min-bytes 1M --max-bytes 64K");
    CHECK(r.status == 2);
    CHECK(r.err.find("--max-bytes 64K: must be >= --min-bytes 1M") != std::string::npos);
    r = run_bitlab(dir, "probe --cold-bytes 2");
    CHECK(r.status == 2);
    CHECK(r.err.find("--cold-bytes 2: must be a whole number of bytes") != std::string::npos);
    r = run_bitlab(dir, "probe --collectives allreduce,broadcst");
    CHECK(r.status == 2);
    CHECK(r.err.find("--collectives broadcst") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "probe.json"));
  }

#ifndef BITLAB_MPIEXEC
  TEST_CASE("without MPI in the build a probe is a clear error (exit 2)") {
    TempDir dir;
    const Result r = run_bitlab(dir, "probe --out " + (dir.path / "p.json").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("built without MPI") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "p.json"));
  }
#else
  TEST_CASE("a probe with one rank is refused: exit 2, one message, nothing written") {
    TempDir dir;
    const std::string out = (dir.path / "p.json").string();
    for (const std::string& launch : {std::string(BITLAB_BINARY) + " probe --out " + out,
                                      std::string(BITLAB_MPIEXEC) + " --allow-run-as-root -np 1 " +
                                          BITLAB_BINARY + " probe --out " + out}) {
      CAPTURE(launch);
      const Result r = run_shell(dir, launch);
      CHECK(r.status == 2);
      const size_t at = r.err.find("a probe needs at least 2 ranks");
      CHECK_MESSAGE(at != std::string::npos, r.err);
      CHECK(r.err.find("a probe needs at least 2 ranks", at + 1) == std::string::npos);
      CHECK_FALSE(fs::exists(out));
    }
    const Result r = probe_under_mpirun(dir, 2, "--ranks-per-node 3 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("--ranks-per-node 3: must divide the ranks (2)") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }

  TEST_CASE("2 ranks: every collective checked (#wrong 0), probe.json valid, calibrate and cost use it") {
    TempDir dir;
    const std::string out = (dir.path / "probe.json").string();
    Result r = probe_under_mpirun(dir, 2, "-b 8 -e 64K -n 3 -w 1 --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    // The table: nccl-tests' columns, a row per size and collective, #wrong 0.
    CHECK(r.out.find("size        count     type  redop       time    algbw    busbw  #wrong") != std::string::npos);
    const auto rows = table_rows(r.out);
    CHECK(rows.size() > 7 * 10);
    std::map<std::string, int> redops;  // nccl-tests' words: sum, none (data movers), mean (ours)
    for (const auto& row : rows) {
      REQUIRE(row.size() == 8);
      CHECK(row.back() == "0");
      ++redops[row[3]];
    }
    CHECK(redops.size() == 3);
    CHECK(redops["none"] == redops["sum"]);  // allgather, alltoall | allreduce, reduce-scatter
    CHECK(redops["mean"] > 0);
    const auto j = nlohmann::json::parse(slurp(out));
    CHECK(j.at("ranks") == 2);
    CHECK(j.at("nodes") == 1);
    CHECK(j.at("results").size() == rows.size());
    check_probe_file(j, "node", 1, 2);
    // Existing --out: refused without --force.
    r = probe_under_mpirun(dir, 2, "-b 8 -e 8 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("--force") != std::string::npos);
    // One node: nothing spans nodes, so the inter-node link is held at a value.
    const std::string net = (dir.path / "net.json").string();
    r = run_bitlab(dir, "calibrate " + out + " --fix inter_latency_us=10 --fix inter_bandwidth_gbps=100 --out " + net);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(r.out.find("allreduce") != std::string::npos);
    r = run_bitlab(dir, "cost --params 1e6 --workers 2 --steps 100 --optimizer onebit_adam --network-file " + net);
    CHECK_MESSAGE(r.status == 0, r.err);
  }

  TEST_CASE("cold calls: each timed alone after every rank wrote --cold-bytes, the median reported") {
    TempDir dir;
    const std::string out = (dir.path / "probe.json").string();
    const Result r = probe_under_mpirun(
        dir, 2, "-b 8 -e 4K -n 5 -w 1 --cold-bytes 64K --collectives alltoall,allgather --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(r.out.find("median over calls of the mean over ranks, each call cold (64 KB written") !=
          std::string::npos);
    const auto j = nlohmann::json::parse(slurp(out));
    CHECK(j.at("loop").at("cold_bytes") == 65536);
    CHECK(j.at("time").get<std::string>().find("median") != std::string::npos);
    CHECK(j.at("results").size() == 2 * 10);  // 8 B .. 4 KB, two collectives
    for (const auto& row : j.at("results")) {
      CAPTURE(row.dump());
      CHECK(row.at("wrong") == 0);
      CHECK(row.at("time_us").get<double>() > 0);
      // The fastest and the slowest rank's medians.
      CHECK(row.at("time_us_min_rank").get<double>() > 0);
      CHECK(row.at("time_us_min_rank").get<double>() <= row.at("time_us_max_rank").get<double>());
    }
  }

  TEST_CASE("4 ranks as 2 emulated nodes: node and world levels, and calibrate fits both links") {
    TempDir dir;
    const std::string out = (dir.path / "probe.json").string();
    Result r = probe_under_mpirun(dir, 4, "--ranks-per-node 2 -b 1K -e 16K -n 3 -w 1 --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const auto j = nlohmann::json::parse(slurp(out));
    CHECK(j.at("nodes") == 2);
    CHECK(j.at("ranks_per_node") == 2);
    check_probe_file(j, "node", 1, 2);
    check_probe_file(j, "world", 2, 2);
    const std::string net = (dir.path / "net.json").string();
    r = run_bitlab(dir, "calibrate " + out + " --out " + net);
    CHECK_MESSAGE(r.status == 0, r.err);
    CHECK(fs::exists(net));
  }
#endif
}
