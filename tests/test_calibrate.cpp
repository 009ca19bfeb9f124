// `bitlab calibrate` (sim/timing/calibrate.hpp, sim/lab/measurements.hpp,
// sim/timing/network_file.hpp, docs/calibrate.md): known parameters come back
// from tables generated with them; the readers refuse what the issue lists;
// network files price as their values say; the 1-bit Adam paper's Table 1 fits.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_fixtures.hpp"
#include "sim/lab/measurements.hpp"
#include "sim/timing/calibrate.hpp"
#include "sim/timing/network_file.hpp"

using namespace bitlab;
using bitlab::testing::TempDir;

namespace {

// A cluster with round numbers, and efficiencies for two collectives (the
// fit must find them: the data call for them).
std::map<std::string, double> truth() {
  return {{"intra_latency_us", 4.0},         {"intra_bandwidth_gbps", 800.0},
          {"inter_latency_us", 25.0},        {"inter_bandwidth_gbps", 90.0},
          {"allreduce_efficiency", 1.0},     {"allgather_efficiency", 0.7},
          {"reduce_scatter_efficiency", 1.0}, {"alltoall_efficiency", 0.5}};
}

// nccl-tests' own layout (src/util.cu, writeResultHeader and
// writeBenchmarkLine*: size, count, type, redop, root, then time, algbw,
// busbw, #wrong out of place and in place), times from the model itself.
std::string nccl_table(const std::string& program, const std::string& collective, int nodes, int g,
                       const std::map<std::string, double>& v, const std::string& algo,
                       const std::string& time_unit = "(us)") {
  std::string s = "# nThread 1 nGpus 1 minBytes 8 maxBytes 268435456 step: 2(factor)\n#\n";
  s += "# Collective test starting: " + program + "\n# Using devices\n";
  char line[512];
  for (int r = 0; r < nodes * g; ++r) {
    std::snprintf(line, sizeof line, "#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:07:00] NVIDIA H100\n",
                  r, 1000 + r, ("node" + std::to_string(r / g)).c_str(), r % g);
    s += line;
  }
  s += "#\n#                                                              out-of-place                       in-place\n";
  s += "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n";
  s += "#        (B)    (elements)                               " + time_unit +
       "  (GB/s)  (GB/s)            " + time_unit + "  (GB/s)  (GB/s)\n";
  for (double bytes = 8; bytes <= 268435456; bytes *= 2) {
    Measurement m{collective, nodes, g, bytes, 0, ""};
    const double us = predicted_time_s(m, v, algo) * 1e6;
    const double t = time_unit == "(ms)" ? us / 1e3 : us;
    std::snprintf(line, sizeof line, "%12.0f  %12.0f     float     sum      -1  %7.6g  %6.2f  %6.2f      0  %7.6g  %6.2f  %6.2f      0\n",
                  bytes, bytes / 4, t, bytes / us / 1e3, bytes / us / 1e3, t, bytes / us / 1e3,
                  bytes / us / 1e3);
    s += line;
  }
  s += "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.0\n#\n";
  return s;
}

std::vector<Measurement> synthetic(const TempDir& dir, const std::map<std::string, double>& v) {
  std::vector<Measurement> all;
  const std::pair<const char*, const char*> kTests[] = {{"all_reduce_perf", "allreduce"},
                                                        {"all_gather_perf", "allgather"},
                                                        {"reduce_scatter_perf", "reduce_scatter"},
                                                        {"alltoall_perf", "alltoall"}};
  for (const auto& [program, collective] : kTests) {
    for (int nodes : {1, 4}) {
      const std::string name = std::string(program) + "_" + std::to_string(nodes) + ".txt";
      const auto file = dir.file(name, nccl_table(program, collective, nodes, 8, v, "hierarchical"));
      auto pts = read_measurements(file, {});
      all.insert(all.end(), pts.begin(), pts.end());
    }
  }
  return all;
}

// probe.json as `bitlab probe` writes it (sim/cli/probe_command.cpp): every
// standard collective at the node level (1 node of g) and the world level
// (nodes x g), times from the model, plus a compressed row (not fitted).
// `step` doubles the size that many times between rows.
nlohmann::ordered_json probe_file(const std::map<std::string, double>& v, int nodes, int g,
                                  int step = 1) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const char* c : {"allreduce", "allgather", "reduce_scatter", "alltoall"}) {
    for (const int level_nodes : {1, nodes}) {
      for (double bytes = 8; bytes <= 268435456; bytes *= std::pow(2.0, step)) {
        Measurement m{c, level_nodes, g, bytes, 0, ""};
        rows.push_back({{"level", level_nodes == 1 ? "node" : "world"}, {"collective", c},
                        {"compressed", false}, {"nodes", level_nodes}, {"ranks_per_node", g},
                        {"bytes", bytes}, {"count", bytes / 4}, {"type", "float"},
                        {"time_us", predicted_time_s(m, v, "hierarchical") * 1e6}, {"wrong", 0}});
      }
    }
  }
  rows.push_back({{"level", "world"}, {"collective", "onebit_allreduce"}, {"compressed", true},
                  {"nodes", nodes}, {"ranks_per_node", g}, {"bytes", 1024}, {"time_us", 1e9},
                  {"wrong", 0}});
  return {{"format", "bitlab-probe-1"}, {"ranks", nodes * g}, {"results", rows}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Relative distance of every fitted link value and efficiency from `want`.
double worst_gap(const Calibration& c, const std::map<std::string, double>& want) {
  double worst = 0;
  for (const auto& [name, value] : want) worst = std::max(worst, std::abs(c.values.at(name) / value - 1));
  return worst;
}

}  // namespace

TEST_SUITE("calibrate") {
  TEST_CASE("nccl-tests tables generated from known parameters give them back within 2 %") {
    TempDir dir;
    const auto pts = synthetic(dir, truth());
    REQUIRE(pts.size() == 4 * 2 * 26);  // 8 B .. 256 MB doubling: 26 sizes
    CHECK(pts[0].nodes == 1);
    CHECK(pts[0].gpus_per_node == 8);
    const Calibration c = calibrate(pts, {});
    // The table prints 6 significant digits, so the parameters come back to
    // about 1e-5; 2 % is the issue's bound.
    CHECK(c.allreduce == "hierarchical");
    CHECK(worst_gap(c, truth()) < 0.02);
    CHECK(c.how.at("allgather_efficiency") == "fitted");
    CHECK(c.how.at("alltoall_efficiency") == "fitted");
    CHECK(c.max_abs_residual < 1e-3);
    // Planted violation: the same tables from a NIC 10 % faster must not pass
    // the 2 % check against the original truth.
    auto faster = truth();
    faster["inter_bandwidth_gbps"] *= 1.1;
    TempDir other;
    const Calibration c2 = calibrate(synthetic(other, faster), {});
    CHECK(worst_gap(c2, truth()) > 0.02);
    CHECK(worst_gap(c2, faster) < 0.02);
  }

  TEST_CASE("an efficiency appears only where the data call for one") {
    TempDir dir;
    auto plain = truth();
    plain["allgather_efficiency"] = 1.0;
    plain["alltoall_efficiency"] = 1.0;
    const Calibration c = calibrate(synthetic(dir, plain), {});
    for (const char* e : kEfficiencyParameters) {
      CAPTURE(e);
      CHECK(c.how.at(e) == "default");
      CHECK(c.values.at(e) == 1.0);
    }
  }

  TEST_CASE("a fit that cannot determine a parameter is refused, naming it") {
    // One message size inside one node, measured twice: one point (the
    // repeats are merged), so latency and bandwidth cannot both be fitted.
    std::vector<Measurement> one_size = {{"allreduce", 1, 8, 1e6, 1e-3, "a.csv:2"},
                                         {"allreduce", 1, 8, 1e6, 1.1e-3, "a.csv:3"}};
    const std::string e = error_of([&] { calibrate(one_size, {}); });
    CHECK(e.find("cannot determine 2 parameters from 1 measurements") != std::string::npos);
    CHECK(e.find("--fix") != std::string::npos);
    // Two node shapes at that size: latency and bandwidth still move together.
    const std::string e1 = error_of([&] {
      calibrate({{"allreduce", 1, 2, 1e6, 1e-3, "b.csv:2"}, {"allreduce", 1, 2, 1e6, 1.1e-3, "b.csv:3"},
                 {"allgather", 1, 2, 1e6, 1e-3, "b.csv:4"}}, {});
    });
    CHECK(e1.find("intra_latency_us") != std::string::npos);
    // With the latency fixed, the bandwidth is determined; the inter-node link
    // is not (nothing spans nodes).
    CalibrationOptions fix;
    fix.fixed["intra_latency_us"] = 5;
    const std::string e2 = error_of([&] { calibrate(one_size, fix); });
    CHECK(e2.find("cannot determine inter_latency_us: no measurement depends on it") != std::string::npos);
    fix.fixed["inter_latency_us"] = 30;
    fix.fixed["inter_bandwidth_gbps"] = 10;
    const Calibration c = calibrate(one_size, fix);
    CHECK(c.how.at("intra_bandwidth_gbps") == "fitted");
    CHECK(c.how.at("inter_latency_us") == "fixed");
    // A collective on one rank, and an unknown --fix name.
    CHECK(error_of([] { calibrate({{"allreduce", 1, 1, 8, 1e-5, "p.csv:2"}}, {}); })
              .find("at least 2 ranks") != std::string::npos);
    CalibrationOptions bad;
    bad.fixed["intra_latncy_us"] = 5;
    CHECK(error_of([&] { calibrate(one_size, bad); }).find("did you mean") != std::string::npos);
  }

  TEST_CASE("bad measurement files name the file, the line, the column and the rule") {
    TempDir dir;
    const std::string header = "collective,nodes,gpus_per_node,bytes,time_ms\n";
    auto err = [&](const std::string& name, const std::string& text, MeasurementReadOptions o = {}) {
      const auto f = dir.file(name, text);
      return error_of([&] { read_measurements(f, o); });
    };
    CHECK(err("neg.csv", header + "allreduce,2,4,1024,-0.5\n").find("neg.csv:2: time_ms = -0.5: must be > 0") != std::string::npos);
    CHECK(err("zero.csv", header + "allreduce,2,4,1024,0\n").find("time_ms = 0: must be > 0") != std::string::npos);
    CHECK(err("cols.csv", "collective,nodes,bytes,time_ms\nallreduce,2,1024,1\n").find("\"gpus_per_node\" is missing") != std::string::npos);
    CHECK(err("name.csv", header + "broadcast,2,4,1024,1\n").find("collective = \"broadcast\"") != std::string::npos);
    CHECK(err("frac.csv", header + "allreduce,1.5,4,1024,1\n").find("nodes = 1.5: must be a whole number") != std::string::npos);
    const std::string mixed =
        nccl_table("all_reduce_perf", "allreduce", 1, 2, truth(), "ring");
    std::string bad_units = mixed;
    const auto at = bad_units.find("(us)");
    bad_units.replace(at, 4, "(ms)");
    CHECK(err("mixed.txt", bad_units).find("mix units") != std::string::npos);
    std::string no_time = mixed;
    for (size_t p; (p = no_time.find(" time ")) != std::string::npos;) no_time.replace(p, 6, " tyme ");
    CHECK(err("notime.txt", no_time).find("missing columns") != std::string::npos);
    std::string wrong = mixed;
    const auto row = wrong.find("\n           8 ");
    REQUIRE(row != std::string::npos);
    const auto end = wrong.find('\n', row + 1);
    std::string first = wrong.substr(row + 1, end - row - 1);
    first.replace(first.find("      0  "), 9, "      3  ");
    wrong.replace(row + 1, end - row - 1, first);
    CHECK(err("wrong.txt", wrong).find("#wrong = 3") != std::string::npos);
    // No rank lines and no --nodes: the ranks are unknown.
    std::string anonymous;
    for (size_t p = 0, q; p < mixed.size(); p = q + 1) {
      q = mixed.find('\n', p);
      const std::string l = mixed.substr(p, q - p);
      if (l.rfind("#  Rank", 0) != 0) anonymous += l + "\n";
    }
    CHECK(err("anon.txt", anonymous).find("--nodes and --gpus-per-node") != std::string::npos);
    MeasurementReadOptions given;
    given.nodes = 1;
    given.gpus_per_node = 2;
    const auto f = dir.file("anon2.txt", anonymous);
    CHECK(read_measurements(f, given).size() == 26);
  }

  TEST_CASE("probe.json: the standard results give known parameters back; compressed rows are not fitted") {
    TempDir dir;
    // Every fourth doubling (8 B, 128 B, ... 128 MB): 7 sizes a level keep
    // this quick and still separate latency from bandwidth.
    const auto file = dir.file("probe.json", probe_file(truth(), 4, 8, 4).dump(2));
    const auto pts = read_measurements(file, {});
    REQUIRE(pts.size() == 4 * 2 * 7);
    CHECK(pts[0].origin == file + ": results[0]");
    CHECK(pts[7].nodes == 4);
    CHECK(pts[7].gpus_per_node == 8);
    const Calibration c = calibrate(pts, {});
    CHECK(worst_gap(c, truth()) < 0.02);  // the issue's bound, as for nccl-tests tables
  }

  TEST_CASE("a damaged probe.json names the file, the field and the rule (exit 2)") {
    TempDir dir;
    const auto good = probe_file(truth(), 4, 8, 4);
    auto err = [&](const std::string& name, const nlohmann::ordered_json& j) {
      const auto f = dir.file(name, j.dump(2));
      return error_of([&] { calibrate(read_measurements(f, {}), {}); });
    };
    auto missing = good;
    missing["results"][2].erase("time_us");
    CHECK(err("missing.json", missing).find("missing.json: results[2].time_us is missing") != std::string::npos);
    auto version = good;
    version["format"] = "bitlab-probe-2";
    CHECK(err("version.json", version).find("version.json: format = \"bitlab-probe-2\": must be \"bitlab-probe-1\"") != std::string::npos);
    auto negative = good;
    negative["results"][5]["time_us"] = -3.5;
    CHECK(err("negative.json", negative).find("negative.json: results[5].time_us = -3.5: must be > 0") != std::string::npos);
    auto wrong = good;
    wrong["results"][1]["wrong"] = 4;
    CHECK(err("wrong.json", wrong).find("wrong.json: results[1].wrong = 4: the collective gave wrong results") != std::string::npos);
    // A single message size: latency and bandwidth cannot be told apart.
    // (Allreduce is left out: priced as a tree, its latency count differs
    // from the ring's, which would tell them apart even at one size.)
    auto one_size = good;
    nlohmann::ordered_json kept = nlohmann::ordered_json::array();
    for (const auto& r : good["results"])
      if (r["bytes"] == 2048 && r["compressed"] == false && r["collective"] != "allreduce") kept.push_back(r);
    REQUIRE(kept.size() == 6);
    one_size["results"] = kept;
    const std::string e = err("one.json", one_size);
    CHECK_MESSAGE(e.find("one.json") != std::string::npos, e);
    CHECK(e.find("cannot tell") != std::string::npos);
    CHECK(e.find("latency_us") != std::string::npos);
    CHECK(e.find("--fix") != std::string::npos);
    // Through the command: exit 2, nothing written.
    const auto f = dir.file("cli.json", negative.dump());
    const auto r = testing::run_bitlab(dir, "calibrate " + f + " --out " + (dir.path / "n.json").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("cli.json: results[5].time_us = -3.5: must be > 0") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir.path / "n.json"));
  }

  TEST_CASE("a network file prices as its values say; experiment fields override it") {
    TempDir dir;
    NetworkFile nf;
    nf.links = {"lab", 4, 5.0, 34.0, 600.0, 5.0, "test"};
    nf.allreduce = "ring";
    nf.efficiency.allgather = 0.5;
    const auto path = dir.file("lab.json", network_file_json(nf, Json::object()).dump(2));
    NetworkOptions o;
    o.file = path;
    const Topology t = make_topology(o, 64);
    CHECK(t.nodes == 16);
    CHECK(t.gpus_per_node == 4);
    CHECK(t.inter_bytes_per_s == doctest::Approx(5.0e9 / 8));
    CHECK(t.allreduce == "ring");
    CommRecord r;
    r.op = "allgather";
    r.ranks = 64;
    r.payload_bytes = 1 << 20;
    Topology plain = t;
    plain.efficiency = {};
    CHECK(collective_time_s(r, t) == doctest::Approx(2 * collective_time_s(r, plain)));
    o.inter_bandwidth_gbps = 10;
    CHECK(make_topology(o, 64).inter_bytes_per_s == doctest::Approx(10e9 / 8));
    o.preset = "ethernet_40g_v100x4";
    CHECK(error_of([&] { make_topology(o, 64); }).find("not both") != std::string::npos);
    o.preset = "none";
    o.file = dir.file("bad.json", R"({"format": "bitlab-network-1", "network": {"gpus_per_node": 4}})");
    CHECK(error_of([&] { make_topology(o, 64); }).find("network.intra_latency_us: missing") != std::string::npos);
    o.file = dir.file("other.json", R"({"format": "x"})");
    CHECK(error_of([&] { make_topology(o, 64); }).find("bitlab calibrate") != std::string::npos);
  }

  TEST_CASE("a protocol switch prices as worked by hand; each half alone is refused") {
    // 1 µs up to 4096 B a message, 10 µs above; 8 Gbit/s = 1e9 B/s, so
    // 1 byte = 1 ns.
    NetworkOptions o;
    o.preset = "custom";
    o.gpus_per_node = 4;
    o.intra_latency_us = 1;
    o.intra_bandwidth_gbps = 8;
    o.inter_latency_us = 1;
    o.inter_bandwidth_gbps = 8;
    o.intra_rendezvous_bytes = 4096;
    o.intra_rendezvous_latency_us = 10;
    const Topology two = make_topology(o, 2);
    CommRecord r;
    r.op = "allgather";
    r.scope = "all";
    r.ranks = 2;
    r.payload_bytes = 8192;  // messages of 4096 B: eager, 1 µs + 4096 ns
    CHECK(collective_time_s(r, two) * 1e6 == doctest::Approx(1 + 4.096));
    r.payload_bytes = 16384;  // messages of 8192 B: 10 µs + 8192 ns
    CHECK(collective_time_s(r, two) * 1e6 == doctest::Approx(10 + 8.192));
    // Ring allreduce on 4 ranks of 65536 B: 6 messages of 16384 B (above
    // the switch) and 2·3/4 · 65536 B on the wire: 60 µs + 98.304 µs.
    r.op = "allreduce";
    r.algorithm = "ring";
    r.ranks = 4;
    r.payload_bytes = 65536;
    CHECK(collective_time_s(r, make_topology(o, 4)) * 1e6 == doctest::Approx(60 + 98.304));
    // Without the switch the same record pays 1 µs a message: 6 + 98.304.
    NetworkOptions plain = o;
    plain.intra_rendezvous_bytes = 0;
    plain.intra_rendezvous_latency_us = 0;
    CHECK(collective_time_s(r, make_topology(plain, 4)) * 1e6 == doctest::Approx(6 + 98.304));
    // A switch needs its size and its latency.
    NetworkOptions half = plain;
    half.intra_rendezvous_bytes = 4096;
    CHECK(error_of([&] { make_topology(half, 4); })
              .find("network.intra_rendezvous_latency_us") != std::string::npos);
    half = plain;
    half.inter_rendezvous_latency_us = 30;
    CHECK(error_of([&] { make_topology(half, 4); }).find("network.inter_rendezvous_bytes") !=
          std::string::npos);
  }

  TEST_CASE("calibrate finds a protocol switch where the data step, and a network file keeps it") {
    // A 2-rank probe of all-to-all and allgather, 8 B to 4 MB, timed by a
    // model whose latency steps from 0.5 µs to 6 µs above 4096 B a message
    // (the shape of Open MPI's eager and rendezvous protocols).
    std::map<std::string, double> v = truth();
    v["intra_latency_us"] = 0.5;
    v["intra_bandwidth_gbps"] = 80;
    v["allgather_efficiency"] = 1;
    v["alltoall_efficiency"] = 1;
    v["intra_rendezvous_bytes"] = 4096;
    v["intra_rendezvous_latency_us"] = 6;
    v["inter_rendezvous_bytes"] = 0;
    v["inter_rendezvous_latency_us"] = 0;
    std::vector<Measurement> pts;
    for (const char* c : {"allgather", "alltoall"})
      for (double bytes = 8; bytes <= 4 << 20; bytes *= 2)
        pts.push_back({c, 1, 2, bytes, predicted_time_s({c, 1, 2, bytes, 0, ""}, v, "ring"), "p.json"});
    CalibrationOptions o;
    o.fixed = {{"inter_latency_us", 10}, {"inter_bandwidth_gbps", 100}};
    const Calibration c = calibrate(pts, o);
    // The switch's size: the largest message measured below the step (the
    // 8192 B collective, 4096 B a message); the others within 2 %.
    CHECK(c.how.at("intra_rendezvous_bytes") == "fitted");
    CHECK(c.values.at("intra_rendezvous_bytes") == 4096);
    for (const char* name : {"intra_latency_us", "intra_bandwidth_gbps", "intra_rendezvous_latency_us"}) {
      CAPTURE(name);
      CHECK(std::abs(c.values.at(name) / v.at(name) - 1) < 0.02);
    }
    CHECK(c.max_abs_residual < 1e-6);
    CHECK(c.how.at("inter_rendezvous_bytes") == "none");
    // Planted: the same data without a switch (--fix intra_rendezvous_bytes=0)
    // fit poorly; the step is what the switch describes.
    CalibrationOptions without = o;
    without.fixed["intra_rendezvous_bytes"] = 0;
    const Calibration flat = calibrate(pts, without);
    CHECK(flat.values.at("intra_rendezvous_bytes") == 0);
    CHECK(flat.rms_residual > 0.15);
    // Data without a step get no switch: the first test's tables are exact.
    TempDir dir;
    CHECK(calibrate(synthetic(dir, truth()), {}).how.at("intra_rendezvous_bytes") == "none");
    // The network file keeps the switch, and prices with it.
    NetworkFile nf;
    nf.links = {"probe", 2, 0.5, 80.0, 10.0, 100.0, "test"};
    nf.links.intra_rendezvous_bytes = 4096;
    nf.links.intra_rendezvous_latency_us = 6;
    const auto path = dir.file("net.json", network_file_json(nf, Json::object()).dump(2));
    NetworkOptions from;
    from.file = path;
    const Topology t = make_topology(from, 2);
    CHECK(t.intra_rendezvous_bytes == 4096);
    CHECK(t.intra_rendezvous_latency_s == doctest::Approx(6e-6));
    CHECK(t.inter_rendezvous_bytes == 0);
    // One key of a switch without the other names the missing one.
    Json j = Json::parse(bitlab::testing::slurp(path));
    j["network"].erase("intra_rendezvous_latency_us");
    from.file = dir.file("half.json", j.dump());
    CHECK(error_of([&] { make_topology(from, 2); })
              .find("network.intra_rendezvous_latency_us: missing") != std::string::npos);
    // --fix of a switch size outside [0, 1e15] is refused.
    CalibrationOptions bad = o;
    bad.fixed["intra_rendezvous_bytes"] = -1;
    CHECK(error_of([&] { calibrate(pts, bad); }).find("--fix intra_rendezvous_bytes") != std::string::npos);
  }

  TEST_CASE("the 1-bit Adam paper's Table 1 fits: every row within 15 %") {
    // experiments/calibrate-table1: Adam's measured allreduce of BERT-Large's
    // fp16 gradients on 1-16 nodes (Tang et al. 2021, Table 1). One size per
    // row, so the intra-node latency is fixed at the presets' assumption (5 us
    // PCIe, 3 us NVLink), as experiments/calibrate-table1/run.sh does.
    for (const char* cluster : {"ethernet", "infiniband"}) {
      CAPTURE(cluster);
      const std::string file =
          std::string(BITLAB_SOURCE_DIR) + "/experiments/calibrate-table1/" + cluster + ".csv";
      CalibrationOptions o;
      o.fixed["intra_latency_us"] = std::string(cluster) == "ethernet" ? 5 : 3;
      const Calibration c = calibrate(read_measurements(file, {}), o);
      CHECK(c.max_abs_residual < 0.15);
      for (const auto& p : c.points) {
        CAPTURE(p.measured.origin);
        // Leave-one-out within 30 % wherever the other rows determine the fit.
        // Rows at one node count are one point (their mean), so leaving out
        // InfiniBand's 8-node point leaves 1, 2 and 4 nodes to extrapolate
        // from: 28.7 %. (Before repeats were merged, two copies of the row
        // left out stayed in the fit, and the check read 7.9 % against 25 %.)
        if (p.measured.nodes > 1 && !std::isnan(p.loo_residual)) CHECK(std::abs(p.loo_residual) < 0.30);
      }
    }
  }

  TEST_CASE("bitlab calibrate writes a network file that cost prices with") {
    TempDir dir;
    const std::string csv = std::string(BITLAB_SOURCE_DIR) + "/experiments/calibrate-table1/ethernet.csv";
    const std::string out = (dir.path / "eth.json").string();
    auto r = testing::run_bitlab(dir, "calibrate " + csv + " --fix intra_latency_us=5 --out " + out);
    REQUIRE(r.status == 0);
    CHECK(r.out.find("leave-one-out") != std::string::npos);
    r = testing::run_bitlab(dir, "calibrate " + csv + " --out " + out);
    CHECK(r.status == 2);  // exists, no --force
    CHECK(r.err.find("--force") != std::string::npos);
    r = testing::run_bitlab(dir, "cost --params 340e6 --workers 64 --steps 1000 --optimizer adam "
                                 "--network-file " + out);
    CHECK(r.status == 0);
    CHECK(r.out.find("eth") != std::string::npos);
    // The one-node row alone cannot separate latency from bandwidth.
    const auto one = dir.file("one.csv", "collective,nodes,gpus_per_node,bytes,time_ms\nallreduce,1,4,680000000,239.76\n");
    r = testing::run_bitlab(dir, "calibrate " + one + " --out " + (dir.path / "x.json").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("cannot determine 2 parameters from 1 measurements") != std::string::npos);
    CHECK(r.err.find("--fix") != std::string::npos);
    CHECK(!std::filesystem::exists(dir.path / "x.json"));
  }

  TEST_CASE("an experiment's network.file is read relative to the experiment file") {
    TempDir dir;
    NetworkFile nf;
    nf.links = {"labnet", 4, 5.0, 34.0, 600.0, 5.0, "test"};
    dir.file("exp/nets/labnet.json", network_file_json(nf, Json::object()).dump(2));
    const auto exp = dir.file("exp/e.json",
                              R"({"params": 1e6, "workers": 8, "steps": 10, "network": {"file": "nets/labnet.json"},
                                  "optimizer": {"name": "adam"}})");
    auto r = testing::run_bitlab(dir, "cost " + exp);  // run from the test's folder, not exp/
    CHECK(r.status == 0);
    CHECK(r.out.find("labnet") != std::string::npos);
    const auto missing = dir.file("exp/m.json", R"({"params": 1e6, "workers": 8, "steps": 10,
                                  "network": {"file": "nope.json"}, "optimizer": {"name": "adam"}})");
    r = testing::run_bitlab(dir, "cost " + missing);
    CHECK(r.status == 2);
    CHECK(r.err.find("network.file") != std::string::npos);
    CHECK(r.err.find("cannot be read") != std::string::npos);
  }

  TEST_CASE("repeated rows are fitted once, at their mean, and the fit says so") {
    TempDir dir;
    // A CSV with every row twice (the second 10 % slower), and an nccl-tests
    // run pasted three times into one file (its "#  Rank" lines each time).
    std::string csv = "collective,nodes,gpus_per_node,bytes,time_ms\n";
    for (double bytes = 1024; bytes <= 1 << 20; bytes *= 4) {
      const Measurement m{"allreduce", 1, 4, bytes, 0, ""};
      const double ms = predicted_time_s(m, truth(), "ring") * 1e3;
      csv += "allreduce,1,4," + std::to_string(bytes) + "," + std::to_string(ms) + "\n";
      csv += "allreduce,1,4," + std::to_string(bytes) + "," + std::to_string(1.1 * ms) + "\n";
    }
    const auto pts = read_measurements(dir.file("twice.csv", csv), {});
    REQUIRE(pts.size() == 6);  // 1 KB .. 1 MB by 4: six sizes, each once
    CHECK(pts[0].repeats == 2);
    // the mean of t and 1.1 t, to the CSV's printed digits (std::to_string: 6 decimals of ms)
    CHECK(pts[0].time_s / pts[0].min_time_s == doctest::Approx(1.05).epsilon(1e-3));
    const std::string once = nccl_table("all_reduce_perf", "allreduce", 2, 8, truth(), "ring");
    const auto pasted = read_measurements(dir.file("all_reduce_3x.txt", once + once + once), {});
    REQUIRE(pasted.size() == 26);
    CHECK(pasted[0].repeats == 3);
    CHECK(pasted[0].nodes == 2);
    CHECK(pasted[0].gpus_per_node == 8);  // not 24: each run's ranks are its own
    // Across files too, and the fit's notes say so.
    auto both = read_measurements(dir.file("a.txt", once), {.collective = "allreduce"});
    const auto again = read_measurements(dir.file("b.txt", once), {.collective = "allreduce"});
    both.insert(both.end(), again.begin(), again.end());
    CalibrationOptions o;
    o.fixed = {{"intra_latency_us", 4}, {"intra_bandwidth_gbps", 800}};
    const Calibration c = calibrate(both, o);
    CHECK(c.points.size() == 26);
    REQUIRE(!c.notes.empty());
    CHECK(c.notes[0].find("52 rows measure 26 point(s) more than once (52 rows, 26 points in all") != std::string::npos);
    CHECK(c.notes[0].find("mean") != std::string::npos);
  }

  TEST_CASE("more distinct points than the fit takes are refused, naming the limit") {
    TempDir dir;
    std::string csv = "collective,nodes,gpus_per_node,bytes,time_ms\n";
    for (size_t k = 0; k <= kMaxCalibrationPoints; ++k)
      csv += "allreduce,2,4," + std::to_string(1000 + k) + ",1\n";
    const std::string e = error_of([&] { read_measurements(dir.file("many.csv", csv), {}); });
    CHECK(e.find("many.csv:" + std::to_string(kMaxCalibrationPoints + 2)) != std::string::npos);
    CHECK(e.find("more than " + std::to_string(kMaxCalibrationPoints) + " distinct measurements") !=
          std::string::npos);
  }

  TEST_CASE("leave-one-out by leverage agrees with the refits") {
    // Noisy one-node allreduces (a fixed +-3 % pattern): each point's
    // leave-one-out error by its leverage against the refit without it. The
    // leverage form is exact for a linear model; this model is nearly linear
    // in log parameters near the fit, so they agree to a fraction of the
    // residual (0.2 percentage points, against residuals of about 3 %).
    std::vector<Measurement> pts;
    const double noise[] = {0.03, -0.02, 0.01, -0.03, 0.02, -0.01, 0.025, -0.015, 0.0, 0.03, -0.03, 0.01};
    for (int k = 0; k < 12; ++k) {
      Measurement m{"allreduce", 1, 4, 1024.0 * std::pow(2.0, k), 0, "n.csv:" + std::to_string(k + 2)};
      m.time_s = predicted_time_s(m, truth(), "ring") * (1 + noise[k]);
      pts.push_back(m);
    }
    CalibrationOptions o;
    o.algorithms = {"ring"};
    o.fixed = {{"inter_latency_us", 25}, {"inter_bandwidth_gbps", 90}};
    const Calibration refit = calibrate(pts, o);
    o.exact_loo_points = 0;
    const Calibration lever = calibrate(pts, o);
    CHECK(refit.loo_method == "refit");
    CHECK(lever.loo_method == "leverage");
    for (size_t i = 0; i < pts.size(); ++i) {
      CAPTURE(i);
      CHECK(std::abs(lever.points[i].loo_residual - refit.points[i].loo_residual) < 0.002);
    }
    // Planted: the plain residual (no leverage) misses the refit by more.
    double worst_plain = 0;
    for (size_t i = 0; i < pts.size(); ++i)
      worst_plain = std::max(worst_plain, std::abs(refit.points[i].residual - refit.points[i].loo_residual));
    CHECK(worst_plain > 0.002);
  }

  TEST_CASE("hosts with different rank counts are refused by name") {
    TempDir dir;
    // 8 ranks, 3 on node0 and 5 on node1 (srun with uneven tasks per node).
    std::string t = nccl_table("all_reduce_perf", "allreduce", 2, 4, truth(), "ring");
    const std::string from = "on      node1 device  0";  // rank 4 -> node0 makes 5 + 3
    const auto at = t.find("#  Rank  3");
    REQUIRE(at != std::string::npos);
    const auto line_end = t.find('\n', at);
    std::string rank3 = t.substr(at, line_end - at);
    const auto host = rank3.find("node0");
    REQUIRE(host != std::string::npos);
    rank3.replace(host, 5, "node1");
    t.replace(at, line_end - at, rank3);
    const std::string e = error_of([&] { read_measurements(dir.file("uneven.txt", t), {}); });
    CHECK(e.find("8 ranks on 2 hosts, 3 on node0, 5 on node1") != std::string::npos);
    CHECK(e.find("the hosts must hold the same number of ranks") != std::string::npos);
    (void)from;
  }

  TEST_CASE("a CSV is read by its header: any order, case, unit column; a name twice is refused") {
    TempDir dir;
    const auto table = read_measurements(
        dir.file("all_reduce.txt", nccl_table("all_reduce_perf", "allreduce", 2, 4, truth(), "ring")), {});
    // The same rows, columns shuffled, upper case, a BOM, times in us.
    std::string csv = "\xEF\xBB\xBF" "Time_US,Bytes,source,GPUS_PER_NODE,Nodes,Collective\n";
    for (const auto& m : table) {
      char row[160];
      std::snprintf(row, sizeof row, "%.6g,%.0f,table,%d,%d,all_reduce\n", m.time_s * 1e6, m.bytes,
                    m.gpus_per_node, m.nodes);
      csv += row;
    }
    const auto pts = read_measurements(dir.file("shuffled.csv", csv), {});
    REQUIRE(pts.size() == table.size());
    for (size_t i = 0; i < pts.size(); ++i) {
      CAPTURE(i);
      CHECK(pts[i].collective == "allreduce");
      CHECK(pts[i].nodes == 2);
      CHECK(pts[i].gpus_per_node == 4);
      CHECK(pts[i].bytes == table[i].bytes);
      CHECK(pts[i].time_s == doctest::Approx(table[i].time_s).epsilon(1e-5));
    }
    const std::string head = "collective,nodes,gpus_per_node,bytes,";
    CHECK(error_of([&] { read_measurements(dir.file("twice.csv", head + "time_ms,bytes\nallreduce,2,4,8,1,8\n"), {}); })
              .find("column \"bytes\" is named twice (columns 4 and 6)") != std::string::npos);
    CHECK(error_of([&] { read_measurements(dir.file("units.csv", head + "time_ms,time_us\nallreduce,2,4,8,1,1000\n"), {}); })
              .find("both give the time") != std::string::npos);
  }

  TEST_CASE("a network file's efficiency must lie in (0, 1]") {
    TempDir dir;
    NetworkFile nf;
    nf.links = {"labnet", 4, 5.0, 34.0, 600.0, 5.0, "test"};
    for (const double e : {7.0, 0.0, -0.5, 1.0000001}) {
      CAPTURE(e);
      nf.efficiency.allgather = e;
      const auto f = dir.file("bad.json", network_file_json(nf, Json::object()).dump());
      CHECK(error_of([&] { read_network_file(f); }).find("network.allgather_efficiency") != std::string::npos);
      CHECK(error_of([&] { read_network_file(f); }).find("must lie in (0, 1]") != std::string::npos);
    }
    for (const double e : {1.0, 0.5}) {
      nf.efficiency.allgather = e;
      const auto f = dir.file("good.json", network_file_json(nf, Json::object()).dump());
      CHECK(read_network_file(f).efficiency.allgather == e);
    }
  }

  TEST_CASE("algorithms that fit alike are said to; the same data rounded otherwise fit the same") {
    TempDir dir;
    // A flat ring at 80 Gbit/s between nodes, measured at 1 and 4 nodes of 4:
    // ring, tree and hierarchical can all fit it (the issue: hierarchical was
    // picked silently, at 68 Gbit/s).
    auto flat = truth();
    flat["inter_bandwidth_gbps"] = 80;
    flat["allgather_efficiency"] = flat["alltoall_efficiency"] = 1;
    std::vector<Measurement> table;
    std::string csv = "collective,nodes,gpus_per_node,bytes,time_ms\n";
    for (int nodes : {1, 4}) {
      auto pts = read_measurements(
          dir.file("all_reduce_" + std::to_string(nodes) + ".txt",
                   nccl_table("all_reduce_perf", "allreduce", nodes, 4, flat, "ring")), {});
      for (const auto& m : pts) {
        char row[128];  // ms to 4 significant digits: other rounding than the table's
        std::snprintf(row, sizeof row, "allreduce,%d,4,%.0f,%.4g\n", nodes, m.bytes, m.time_s * 1e3);
        csv += row;
      }
      table.insert(table.end(), pts.begin(), pts.end());
    }
    const Calibration a = calibrate(table, {});
    const Calibration b = calibrate(read_measurements(dir.file("same.csv", csv), {}), {});
    for (const Calibration* c : {&a, &b}) {
      CHECK(c->allreduce == "ring");
      CHECK(c->tied.size() >= 2);
      CHECK(c->values.at("inter_bandwidth_gbps") == doctest::Approx(80).epsilon(0.01));
      const auto note = std::find_if(c->notes.begin(), c->notes.end(),
                                     [](const std::string& n) { return n.find("fit alike") != std::string::npos; });
      REQUIRE(note != c->notes.end());
      CHECK(note->find("at 16 nodes x 4") != std::string::npos);  // 4x the largest measured
      CHECK(note->find("to tell them apart, measure allreduce across") != std::string::npos);
    }
    CHECK(a.tied == b.tied);
  }

  TEST_CASE("--level-from takes a level the data do not cover from a preset, and the refusal names it") {
    TempDir dir;
    // Two nodes of 8, nothing inside one node: the usual first measurement.
    const auto two = dir.file("all_reduce_2.txt", nccl_table("all_reduce_perf", "allreduce", 2, 8, truth(), "ring"));
    const std::string out = (dir.path / "n.json").string();
    auto r = testing::run_bitlab(dir, "calibrate " + two + " --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("--level-from PRESET") != std::string::npos);
    CHECK(!std::filesystem::exists(out));
    r = testing::run_bitlab(dir, "calibrate " + two + " --level-from infiniband_hdr_a10x8 --out " + out);
    CHECK(r.status == 2);
    CHECK(r.err.find("did you mean") != std::string::npos);
    r = testing::run_bitlab(dir, "calibrate " + two + " --level-from infiniband_hdr_a100x8 --out " + out);
    CHECK(r.status == 0);
    CHECK(r.out.find("(preset)") != std::string::npos);
    CHECK(r.out.find("taken from preset infiniband_hdr_a100x8") != std::string::npos);
    CHECK(read_network_file(out).links.intra_bandwidth_gbps == 1840);
    CalibrationOptions o;
    o.level_from = {{"intra_latency_us", 3}, {"intra_bandwidth_gbps", 2400},
                    {"inter_latency_us", 5}, {"inter_bandwidth_gbps", 200}};
    o.level_from_name = "test_preset";
    const Calibration c = calibrate(read_measurements(two, {}), o);
    CHECK(c.how.at("intra_latency_us") == "preset");
    CHECK(c.how.at("intra_bandwidth_gbps") == "preset");
    CHECK(c.values.at("intra_bandwidth_gbps") == 2400);
    CHECK(c.how.at("inter_bandwidth_gbps") == "fitted");
    CHECK(c.values.at("inter_bandwidth_gbps") == doctest::Approx(90).epsilon(0.02));
    CHECK(c.notes.end() != std::find_if(c.notes.begin(), c.notes.end(), [](const std::string& n) {
            return n.find("taken from preset test_preset: no measurement runs inside one node") != std::string::npos;
          }));
  }
}
