// `bitlab recost`: a results folder written by hand (known numbers) is
// re-priced under a custom network and the new columns equal the hand
// values; a real run re-priced under its own network reproduces its own time
// columns exactly; the write is atomic; label clashes and malformed folders
// are ConfigErrors naming the file.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/lab/recost.hpp"
#include "sim/timing/network.hpp"
#include "tests/fixtures.hpp"
#include "tests/cli_fixtures.hpp"

using namespace bitlab;
namespace fs = std::filesystem;

using testing::config_error_message;
using testing::config_error_path;

namespace {

using testing::TempDir;

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  int col(const std::string& name) const {
    for (size_t k = 0; k < header.size(); ++k) {
      if (header[k] == name) return static_cast<int>(k);
    }
    return -1;
  }
  double num(size_t row, const std::string& name) const {
    const int k = col(name);
    REQUIRE_MESSAGE(k >= 0, name);
    return std::stod(rows.at(row).at(static_cast<size_t>(k)));
  }
};

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream ss(line);
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

Csv read_csv(const fs::path& p) {
  Csv c;
  std::ifstream in(p);
  std::string line;
  if (std::getline(in, line)) c.header = split(line);
  while (std::getline(in, line)) c.rows.push_back(split(line));
  return c;
}

bool has_tmp_file(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().string().find(".tmp") != std::string::npos) return true;
  }
  return false;
}

// A results folder with known numbers: 4 workers, 10 ms of compute per step,
// three steps (one allreduce; an alltoall of bits + an allgather of scales;
// nothing). The run's own time columns hold made-up values (sim_time 0.5 s).
const char* kConfig = R"({
  "name": "hand", "description": "", "seed": 7, "steps": 3, "eval_every": 0,
  "grad_norm_every": 1,
  "problem": {"name": "quadratic"},
  "cluster": {"workers": 4, "batch_size": 8, "sharding": "iid", "dirichlet_alpha": 0.5},
  "optimizer": {"name": "adam"},
  "network": {"preset": "ethernet_40g_v100x4"},
  "compute": {"step_ms": 10}
})";

const char* kCommLog =
    "step,op,algorithm,dtype,scope,ranks,groups,payload_bytes,sent_bytes,messages\n"
    "1,allreduce,ring,fp32,all,4,1,4000000,6000000,6\n"
    "2,alltoall,pairwise,bits,all,4,1,125000,93750,3\n"
    "2,allgather,ring,fp32,all,4,1,16,12,3\n";

const char* kMetrics =
    "step,phase,train_loss,grad_norm,eval_loss,bytes_sent,bytes_sent_cum,messages,messages_cum,"
    "compute_s,comm_s,step_s,sim_time_s,wall_s\n"
    "1,warmup,1.5,0.25,,6000000,6000000,6,6,0.01,0.1,0.11,0.11,0.001\n"
    "2,compressed,1.25,0.125,,93762,6093762,6,12,0.01,0.2,0.21,0.32,0.002\n"
    "3,compressed,1.125,0.0625,0.75,0,6093762,0,12,0.01,0.17,0.18,0.5,0.003\n";

void write_hand_run(const fs::path& dir) {
  write_file(dir / "config.json", kConfig);
  write_file(dir / "comm_log.csv", kCommLog);
  write_file(dir / "metrics.csv", kMetrics);
}

// One node of 4: α = 5 µs, B = 80 Gbps = 10^10 B/s.
RecostOptions custom_options(const fs::path& dir, const std::string& label = "lab") {
  RecostOptions o;
  o.run_dir = dir.string();
  o.network = "custom";
  o.sets = {"network.gpus_per_node=4", "network.intra_latency_us=5",
            "network.intra_bandwidth_gbps=80", "network.inter_latency_us=50",
            "network.inter_bandwidth_gbps=8"};
  o.label = label;
  return o;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A sweep folder of `runs` hand-written runs run-1 ... run-N: sweep.json
// lists them, sweep.csv has a row each (a quoted cell with a comma, the run
// folder last, as the sweep runner writes it).
fs::path write_hand_sweep(const fs::path& root, int runs) {
  const fs::path sweep = root / "sweep";
  Json list = Json::array();
  std::string csv = "name,\"a,b\",dir\n";
  for (int k = 1; k <= runs; ++k) {
    const std::string n = std::to_string(k), name = "run-" + n;
    fs::create_directories(sweep / name);
    write_hand_run(sweep / name);
    list.push_back({{"dir", name}});
    csv.append("x").append(n).append(",\"").append(n).append(",2\",").append(name).append("\n");
  }
  write_file(sweep / "sweep.json", Json{{"name", "hand"}, {"runs", list}}.dump());
  write_file(sweep / "sweep.csv", csv);
  return sweep;
}

// Every file under a sweep folder and its content.
std::map<std::string, std::string> sweep_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = read_file(e.path());
  }
  return files;
}

}  // namespace

TEST_SUITE("recost") {
  TEST_CASE("a hand-written run re-priced under a custom network gives the hand values") {
    TempDir tmp;
    write_hand_run(tmp.path);
    const RecostResult r = recost_run(custom_options(tmp.path));
    CHECK(r.label == "lab");
    CHECK(r.steps == 3);
    CHECK(r.collectives == 3);
    CHECK(r.topology.nodes == 1);
    CHECK(r.topology.gpus_per_node == 4);
    CHECK(!r.replaced);

    // step 1: ring allreduce, 4 ranks, 4 MB: 6α + 1.5·S/B = 30 µs + 600 µs.
    // step 2: alltoall of 125 kB: 3α + 0.75·S/B = 15 + 9.375 µs;
    //         allgather of 16 B: 15 µs + 0.0012 µs.
    // step 3: no collective, compute only.
    const double comm[3] = {630e-6, 24.375e-6 + 15.0012e-6, 0.0};
    const Csv m = read_csv(tmp.path / "metrics.csv");
    const std::vector<std::string> old_header =
        split(std::string(kMetrics).substr(0, std::string(kMetrics).find('\n')));
    // The new columns are appended at the end; every old column keeps its place.
    REQUIRE(m.header.size() == old_header.size() + 4);
    for (size_t k = 0; k < old_header.size(); ++k) CHECK(m.header[k] == old_header[k]);
    CHECK(m.header[old_header.size() + 0] == "compute_s@lab");
    CHECK(m.header[old_header.size() + 1] == "comm_s@lab");
    CHECK(m.header[old_header.size() + 2] == "step_s@lab");
    CHECK(m.header[old_header.size() + 3] == "sim_time_s@lab");
    REQUIRE(m.rows.size() == 3);
    double sim = 0;
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(m.rows[i].size() == m.header.size());
      CHECK(m.num(i, "compute_s@lab") == doctest::Approx(0.01).epsilon(1e-12));
      CHECK(m.num(i, "comm_s@lab") == doctest::Approx(comm[i]).epsilon(1e-12));
      CHECK(m.num(i, "step_s@lab") == doctest::Approx(0.01 + comm[i]).epsilon(1e-12));
      sim += 0.01 + comm[i];
      CHECK(m.num(i, "sim_time_s@lab") == doctest::Approx(sim).epsilon(1e-12));
    }
    CHECK(r.sim_time_s == doctest::Approx(0.03 + 630e-6 + 39.3762e-6).epsilon(1e-12));
    CHECK(r.compute_s == doctest::Approx(0.03).epsilon(1e-12));
    CHECK(r.comm_s == doctest::Approx(630e-6 + 39.3762e-6).epsilon(1e-12));
    // The old cells are untouched, empty ones included.
    const std::vector<std::string> row3 = split(
        "3,compressed,1.125,0.0625,0.75,0,6093762,0,12,"
        "0.01,0.17,0.18,0.5,0.003");
    for (size_t k = 0; k < row3.size(); ++k) CHECK(m.rows[2][k] == row3[k]);
    CHECK(m.rows[0][4] == "");
    // The run's own time, for the summary.
    CHECK(r.has_old);
    CHECK(r.old_sim_time_s == 0.5);
    CHECK(r.old_network == "ethernet_40g_v100x4");
    // Atomic: nothing left beside the file.
    CHECK(!has_tmp_file(tmp.path));
  }

  TEST_CASE("labels stack at the end; a clash is refused unless forced") {
    TempDir tmp;
    write_hand_run(tmp.path);
    recost_run(custom_options(tmp.path, "a"));
    const std::string after_a = read_file(tmp.path / "metrics.csv");
    // The same label again: refused, the file unchanged.
    const std::string err =
        config_error_message([&] { recost_run(custom_options(tmp.path, "a")); });
    CHECK(contains(err, "metrics.csv"));
    CHECK(contains(err, "\"a\""));
    CHECK(contains(err, "--force"));
    CHECK(read_file(tmp.path / "metrics.csv") == after_a);
    CHECK(!has_tmp_file(tmp.path));

    // A second label lands after the first.
    RecostOptions b = custom_options(tmp.path, "b");
    b.sets.push_back("network.intra_bandwidth_gbps=8");  // 10x slower links
    recost_run(b);
    Csv m = read_csv(tmp.path / "metrics.csv");
    REQUIRE(m.header.size() == 14 + 8);
    CHECK(m.header[14] == "compute_s@a");
    CHECK(m.header[18] == "compute_s@b");
    CHECK(m.header[21] == "sim_time_s@b");
    // ring on 4 at 10^9 B/s: 30 µs + 6 ms.
    CHECK(m.num(0, "comm_s@b") == doctest::Approx(6030e-6).epsilon(1e-12));
    CHECK(m.num(0, "comm_s@a") == doctest::Approx(630e-6).epsilon(1e-12));

    // --force rewrites label a in place with the slow links.
    RecostOptions forced = custom_options(tmp.path, "a");
    forced.sets.push_back("network.intra_bandwidth_gbps=8");
    forced.force = true;
    const RecostResult r = recost_run(forced);
    CHECK(r.replaced);
    m = read_csv(tmp.path / "metrics.csv");
    CHECK(m.header.size() == 14 + 8);
    CHECK(m.header[14] == "compute_s@a");
    for (size_t i = 0; i < 3; ++i) {
      CHECK(m.rows[i].size() == m.header.size());
      CHECK(m.rows[i][14 + 3] == m.rows[i][18 + 3]);  // sim_time_s@a == sim_time_s@b
    }
    CHECK(!has_tmp_file(tmp.path));

    // A label that cannot be a column name.
    CHECK(contains(config_error_message([&] { recost_run(custom_options(tmp.path, "a,b")); }),
                   "--label"));
  }

  TEST_CASE("the default label is the preset; compute comes from the run unless overridden") {
    TempDir tmp;
    write_hand_run(tmp.path);
    RecostOptions o;
    o.run_dir = tmp.path.string();
    o.network = "infiniband_qdr_v100x8";
    const RecostResult r = recost_run(o);
    CHECK(r.label == "infiniband_qdr_v100x8");
    CHECK(r.topology.nodes == 1);  // 4 workers on one 8-GPU node
    const Csv m = read_csv(tmp.path / "metrics.csv");
    CHECK(m.col("step_s@infiniband_qdr_v100x8") == 16);
    CHECK(m.num(2, "step_s@infiniband_qdr_v100x8") == doctest::Approx(0.01).epsilon(1e-12));

    // A straggler at twice the time: every step's compute doubles.
    RecostOptions s = custom_options(tmp.path, "straggler");
    s.sets.push_back("compute.straggler_worker=1");
    s.sets.push_back("compute.straggler_factor=2");
    recost_run(s);
    // Jitter: the slowest worker of RngStream(seed 7, kJitter, worker, step).
    RecostOptions j = custom_options(tmp.path, "jitter");
    j.sets.push_back("compute.jitter=0.2");
    recost_run(j);
    const Csv m2 = read_csv(tmp.path / "metrics.csv");
    ComputeOptions c;
    c.step_ms = 10;
    c.jitter = 0.2;
    for (size_t i = 0; i < 3; ++i) {
      CHECK(m2.num(i, "compute_s@straggler") == doctest::Approx(0.02).epsilon(1e-12));
      std::vector<double> w(4);
      worker_compute_s(c, base_compute_s(c, 0, 0), 7, static_cast<int64_t>(i) + 1, w);
      const double slowest = *std::max_element(w.begin(), w.end());
      CHECK(m2.num(i, "compute_s@jitter") == slowest);
      CHECK(slowest != doctest::Approx(0.01));
    }
  }

  TEST_CASE("derived compute: model size from summary.json's dim") {
    TempDir tmp;
    write_hand_run(tmp.path);
    Json config = Json::parse(kConfig);
    config["compute"] = {{"device_tflops", 1.0}};
    write_file(tmp.path / "config.json", config.dump(2));
    write_file(tmp.path / "summary.json", R"({"status": "completed", "dim": 1000,
                                              "batch_samples_per_worker": 8})");
    recost_run(custom_options(tmp.path));
    const Csv m = read_csv(tmp.path / "metrics.csv");
    // 6 FLOPs · 1000 params · 8 samples / 10^12 FLOP/s.
    CHECK(m.num(2, "compute_s@lab") == doctest::Approx(4.8e-8).epsilon(1e-12));
    // model_params overrides the dimension.
    RecostOptions o = custom_options(tmp.path, "big");
    o.sets.push_back("compute.model_params=1e9");
    recost_run(o);
    CHECK(read_csv(tmp.path / "metrics.csv").num(2, "compute_s@big") ==
          doctest::Approx(0.048).epsilon(1e-12));
  }

  TEST_CASE("bad networks and overrides are ConfigErrors naming network.<field>") {
    TempDir tmp;
    write_hand_run(tmp.path);
    const std::string before = read_file(tmp.path / "metrics.csv");
    RecostOptions o;
    o.run_dir = tmp.path.string();
    o.network = "infiniband_qdr";
    CHECK(config_error_path([&] { recost_run(o); }) == "network.preset");
    o.network = "custom";  // no values
    CHECK(config_error_path([&] { recost_run(o); }) == "network.gpus_per_node");
    o = custom_options(tmp.path);
    o.sets.erase(o.sets.begin() + 2);  // no intra bandwidth
    CHECK(config_error_path([&] { recost_run(o); }) == "network.intra_bandwidth_gbps");
    o = custom_options(tmp.path);
    o.sets[0] = "network.gpus_per_node=3";  // 4 workers on nodes of 3
    CHECK(config_error_path([&] { recost_run(o); }) == "network.gpus_per_node");
    o = custom_options(tmp.path);
    o.sets.push_back("network.inter_bandwidth_gbps=-1");
    const std::string neg = config_error_message([&] { recost_run(o); });
    CHECK(contains(neg, "--set network.inter_bandwidth_gbps=-1"));
    CHECK(contains(neg, "must be >= 0"));
    o = custom_options(tmp.path);
    o.sets.push_back("network.bandwidth=3");
    CHECK(config_error_path([&] { recost_run(o); }) == "network.bandwidth");
    o = custom_options(tmp.path);
    o.sets.push_back("compute.overlap=2");
    CHECK(config_error_path([&] { recost_run(o); }) == "compute.overlap");
    o = custom_options(tmp.path);
    o.sets.push_back("optimizer.lr=0.1");
    CHECK(contains(config_error_message([&] { recost_run(o); }), "--set optimizer.lr=0.1"));
    // The run had no network and none is given.
    Json config = Json::parse(kConfig);
    config["network"] = {{"preset", "none"}};
    write_file(tmp.path / "config.json", config.dump());
    o = RecostOptions{};
    o.run_dir = tmp.path.string();
    CHECK(contains(config_error_message([&] { recost_run(o); }), "--network"));
    CHECK(read_file(tmp.path / "metrics.csv") == before);
    CHECK(!has_tmp_file(tmp.path));
  }

  TEST_CASE("a missing or malformed run folder is a ConfigError naming the file and the line") {
    struct Case {
      const char* file;
      std::string text;  // "" : delete the file
      const char* expect;
    };
    const std::string header_c =
        "step,op,algorithm,dtype,scope,ranks,groups,payload_bytes,sent_bytes,messages\n";
    const std::string header_m =
        std::string(kMetrics).substr(0, std::string(kMetrics).find('\n') + 1);
    const std::vector<Case> cases = {
        {"comm_log.csv", "", "comm_log.csv: no such file"},
        {"metrics.csv", "", "metrics.csv: no such file"},
        {"config.json", "", "config.json: no such file"},
        {"config.json", "{\"seed\": 1,", "config.json:1:"},
        {"config.json", R"({"seed": 1, "cluster": {"batch_size": 8}})", "cluster.workers"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4000000,6000000\n",
         "comm_log.csv: line 2: expected 10 columns, found 9"},
        {"comm_log.csv", "step,op\n", "comm_log.csv: line 1: expected the header"},
        {"comm_log.csv",
         header_c + "1,allreduce,ring,fp32,all,4,1,4000000,6000000,6\n" +
             "2,gossip,ring,fp32,all,4,1,4,4,1\n",
         "comm_log.csv: line 3: column op"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4e6,6000000,6\n",
         "comm_log.csv: line 2: column payload_bytes: \"4e6\" is not an integer"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,rack,4,1,4,4,6\n",
         "comm_log.csv: line 2: column scope"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4,nan,6\n",
         "comm_log.csv: line 2: column sent_bytes: \"nan\" must be a finite number >= 0"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4,inf,6\n",
         "comm_log.csv: line 2: column sent_bytes: \"inf\" must be a finite"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4,-8,6\n",
         "comm_log.csv: line 2: column sent_bytes: \"-8\" must be a finite number >= 0"},
        {"comm_log.csv", header_c + "1,allreduce,ring,fp32,all,4,1,4,4,-6\n",
         "comm_log.csv: line 2: column messages: must be >= 0"},
        {"comm_log.csv",
         header_c + "2,allreduce,ring,fp32,all,4,1,4,4,6\n" +
             "1,allreduce,ring,fp32,all,4,1,4,4,6\n",
         "comm_log.csv: line 3: step 1 comes after step 2"},
        {"comm_log.csv", header_c + "9,allreduce,ring,fp32,all,4,1,4,4,6\n",
         "comm_log.csv: line 2: step 9 has no row in metrics.csv"},
        {"metrics.csv", "", "metrics.csv: no such file"},
        {"metrics.csv", header_m + "1,warmup,1.5\n", "metrics.csv: line 2: expected 14 columns"},
        {"metrics.csv", "phase,wall_s\nwarmup,1\n", "metrics.csv: line 1: no \"step\" column"},
        {"metrics.csv", header_m + "x,warmup,1.5,0.25,,6,6,6,6,0.01,0.1,0.11,0.11,0.001\n",
         "metrics.csv: line 2: column step"},
        {"metrics.csv",
         header_m + "1,warmup,1.5,0.25,,6,6,6,6,0.01,0.1,0.11,0.11,0.001\n" +
             "1,warmup,1.5,0.25,,6,6,6,6,0.01,0.1,0.11,0.11,0.001\n",
         "metrics.csv: line 3: step 1 comes after step 1"},
    };
    for (const auto& c : cases) {
      const std::string file = c.file, expect = c.expect;
      CAPTURE(file);
      CAPTURE(expect);
      TempDir tmp;
      write_hand_run(tmp.path);
      if (c.text.empty()) {
        fs::remove(tmp.path / c.file);
      } else {
        write_file(tmp.path / c.file, c.text);
      }
      const std::string metrics_before =
          fs::exists(tmp.path / "metrics.csv") ? read_file(tmp.path / "metrics.csv") : "";
      const std::string err = config_error_message([&] { recost_run(custom_options(tmp.path)); });
      CAPTURE(err);
      CHECK(contains(err, c.expect));
      CHECK(contains(err, tmp.path.string()));  // the file is named with its folder
      if (!metrics_before.empty()) CHECK(read_file(tmp.path / "metrics.csv") == metrics_before);
      CHECK(!has_tmp_file(tmp.path));
    }
    // Not a folder at all.
    RecostOptions o;
    o.run_dir = "/nonexistent/bitlab/run";
    o.network = "ethernet_10g_a100x8";
    CHECK(contains(config_error_message([&] { recost_run(o); }), "/nonexistent/bitlab/run"));
  }

  TEST_CASE("CRLF files and an empty metrics file are read") {
    TempDir tmp;
    write_hand_run(tmp.path);
    std::string crlf;
    for (char ch : std::string(kCommLog)) {
      if (ch == '\n') crlf += '\r';
      crlf += ch;
    }
    write_file(tmp.path / "comm_log.csv", crlf);
    CHECK(recost_run(custom_options(tmp.path)).collectives == 3);
    // A run stopped before its first step: header only, no records.
    TempDir empty;
    write_hand_run(empty.path);
    write_file(empty.path / "metrics.csv",
               std::string(kMetrics).substr(0, std::string(kMetrics).find('\n') + 1));
    write_file(empty.path / "comm_log.csv",
               std::string(kCommLog).substr(0, std::string(kCommLog).find('\n') + 1));
    const RecostResult r = recost_run(custom_options(empty.path));
    CHECK(r.steps == 0);
    CHECK(read_csv(empty.path / "metrics.csv").header.size() == 18);
  }

  // Needs the run loop's network integration (network/compute sections and
  // the compute_s,comm_s,step_s,sim_time_s columns in metrics.csv).
  TEST_CASE("re-pricing a real run under its own network reproduces its time columns exactly") {
    const char* experiments[] = {
        // 1-bit Adam on 2 nodes x 4, jitter, a straggler, overlap, compression cost.
        R"({"name": "own", "steps": 24, "problem": {"name": "quadratic", "dim": 1000},
            "cluster": {"workers": 8, "batch_size": 16},
            "optimizer": {"name": "onebit_adam", "lr": 0.01, "freeze_step": 10},
            "network": {"preset": "ethernet_40g_v100x4"},
            "compute": {"step_ms": 5, "jitter": 0.2, "straggler_worker": 3,
                        "straggler_factor": 1.5, "overlap": 0.5, "memory_bandwidth_gbytes_per_s": 900}})",
        // Adam with a derived compute time (dim and a full batch from the data).
        R"({"name": "own2", "steps": 12, "problem": {"name": "logistic"},
            "cluster": {"workers": 4, "batch_size": "full"},
            "optimizer": {"name": "adam", "lr": 0.01},
            "network": {"preset": "infiniband_qdr_v100x8", "allreduce": "tree"},
            "compute": {"device_tflops": 0.001, "overlap": 0.3, "jitter": 0.05}})",
    };
    for (const char* text : experiments) {
      TempDir tmp;
      const Experiment e = resolve_experiment(Json::parse(text), "own");
      RunOptions ro;
      ro.out_dir = (tmp.path / "run").string();
      ro.quiet = true;
      std::fflush(stdout);
      REQUIRE(run_experiment(e, ro) == 0);
      const fs::path dir = tmp.path / "run";
      const Csv before = read_csv(dir / "metrics.csv");
      REQUIRE_MESSAGE(before.col("step_s") >= 0, "metrics.csv has no step_s column yet");

      auto check_same = [&](const std::string& label) {
        const Csv m = read_csv(dir / "metrics.csv");
        REQUIRE(m.rows.size() == before.rows.size());
        for (size_t i = 0; i < m.rows.size(); ++i) {
          CAPTURE(i);
          for (const char* c : {"compute_s", "comm_s", "step_s", "sim_time_s"}) {
            CAPTURE(c);
            CHECK(m.rows[i][m.col(std::string(c) + "@" + label)] == m.rows[i][m.col(c)]);
          }
        }
      };
      // Its own network section, as saved in config.json.
      RecostOptions o;
      o.run_dir = dir.string();
      o.label = "own";
      const RecostResult r = recost_run(o);
      check_same("own");
      CHECK(r.has_old);
      CHECK(r.sim_time_s == r.old_sim_time_s);
      // Without summary.json the dimension and batch are rebuilt from the config.
      fs::remove(dir / "summary.json");
      o.label = "rebuilt";
      recost_run(o);
      check_same("rebuilt");
    }
  }

  TEST_CASE("a sweep is re-priced all or nothing: a bad run 4 leaves runs 1-3 unchanged") {
    TempDir tmp;
    const fs::path sweep = write_hand_sweep(tmp.path, 4);
    std::string broken = kCommLog;
    broken.replace(broken.find("alltoall"), 8, "gossip");
    write_file(sweep / "run-4" / "comm_log.csv", broken);
    const auto before = sweep_files(sweep);
    const std::string err = config_error_message([&] { recost_sweep(custom_options(sweep)); });
    CHECK(contains(err, "run run-4: "));
    CHECK(contains(err, "comm_log.csv: line 3: column op"));
    CHECK(sweep_files(sweep) == before);  // runs 1-3 and sweep.csv included
    for (int k = 1; k <= 4; ++k) CHECK(!has_tmp_file(sweep / ("run-" + std::to_string(k))));
    // A label clash found in sweep.csv only after every run was priced (the
    // default label, the preset's name, is known only then): nothing changes.
    write_file(sweep / "run-4" / "comm_log.csv", kCommLog);
    std::string csv = read_file(sweep / "sweep.csv");
    csv.replace(csv.find(",dir"), 4, ",comm_s@custom,dir");
    write_file(sweep / "sweep.csv", csv);
    const auto before_clash = sweep_files(sweep);
    RecostOptions o = custom_options(sweep);
    o.label = "";
    CHECK(contains(config_error_message([&] { recost_sweep(o); }),
                   "sweep.csv: already has a column comm_s@custom"));
    CHECK(sweep_files(sweep) == before_clash);
    for (int k = 1; k <= 4; ++k) CHECK(!has_tmp_file(sweep / ("run-" + std::to_string(k))));
  }

  TEST_CASE("recost SWEEP --force rewrites the label's columns in every run and in sweep.csv") {
    TempDir tmp;
    const fs::path sweep = write_hand_sweep(tmp.path, 3);
    const SweepRecost first = recost_sweep(custom_options(sweep, "lab"));
    REQUIRE(first.runs.size() == 3);
    CHECK_FALSE(first.csv_replaced);
    Csv s = read_csv(sweep / "sweep.csv");
    REQUIRE(s.col("comm_s@lab") >= 0);
    CHECK(s.num(0, "comm_s@lab") == doctest::Approx(first.runs[0].second.comm_s));
    // Again without --force: refused, nothing changed.
    const auto after_first = sweep_files(sweep);
    CHECK(contains(config_error_message([&] { recost_sweep(custom_options(sweep, "lab")); }),
                   "already has"));
    CHECK(sweep_files(sweep) == after_first);
    // With --force: slower links, the same columns rewritten in place.
    RecostOptions forced = custom_options(sweep, "lab");
    forced.sets.push_back("network.intra_bandwidth_gbps=8");
    forced.force = true;
    const SweepRecost second = recost_sweep(forced);
    REQUIRE(second.runs.size() == 3);
    CHECK(second.csv_replaced);
    s = read_csv(sweep / "sweep.csv");
    // (read_csv splits the quoted "a,b" in two; so it does every row's.)
    CHECK(s.header == std::vector<std::string>{"name", "\"a", "b\"", "dir", "comm_s@lab",
                                               "sim_time_s@lab"});
    for (size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      CHECK(second.runs[i].second.replaced);
      CHECK(s.num(i, "comm_s@lab") == doctest::Approx(second.runs[i].second.comm_s));
      CHECK(s.num(i, "sim_time_s@lab") == doctest::Approx(second.runs[i].second.sim_time_s));
      CHECK(second.runs[i].second.comm_s > first.runs[i].second.comm_s);
      const Csv m = read_csv(sweep / ("run-" + std::to_string(i + 1)) / "metrics.csv");
      CHECK(m.header.size() == 14 + 4);  // the label's columns once
      CHECK(m.num(0, "comm_s@lab") == doctest::Approx(6030e-6).epsilon(1e-12));
    }
    // The quoted cell with a comma kept its place and text.
    CHECK(contains(read_file(sweep / "sweep.csv"), "x1,\"1,2\",run-1,"));
    // A second label lands after the first, each row's values found by its
    // "dir" cell (no longer the last).
    const SweepRecost third = recost_sweep(custom_options(sweep, "other"));
    s = read_csv(sweep / "sweep.csv");
    REQUIRE(s.header.size() == 8);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(s.num(i, "comm_s@other") == doctest::Approx(third.runs[i].second.comm_s));
      CHECK(s.num(i, "comm_s@lab") == doctest::Approx(second.runs[i].second.comm_s));
    }
  }
}
