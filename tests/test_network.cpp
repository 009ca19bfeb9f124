// The network and time model (docs/algorithms.md §8): costs computable by hand
// equal exactly; monotonicity; the 1-bit allreduce's four latencies;
// stragglers, jitter, overlap, compression; presets and their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/comm/comm.hpp"
#include "sim/core/rng.hpp"
#include "sim/timing/network.hpp"
#include "tests/fixtures.hpp"

using namespace bitlab;

using testing::config_error_message;
using testing::config_error_path;

namespace {

// A topology written down directly: every α and B is a number in the test.
Topology topo(int nodes, int g, double intra_alpha_s, double intra_bytes_per_s,
              double inter_alpha_s, double inter_bytes_per_s, std::string allreduce = "as_logged") {
  Topology t;
  t.name = "test";
  t.nodes = nodes;
  t.gpus_per_node = g;
  t.intra_latency_s = intra_alpha_s;
  t.intra_bytes_per_s = intra_bytes_per_s;
  t.inter_latency_s = inter_alpha_s;
  t.inter_bytes_per_s = inter_bytes_per_s;
  t.allreduce = std::move(allreduce);
  return t;
}

CommRecord rec(const char* op, const char* algorithm, int ranks, int64_t payload_bytes,
               const char* dtype = "fp32", const char* scope = "all") {
  CommRecord r;
  r.op = op;
  r.algorithm = algorithm;
  r.dtype = dtype;
  r.scope = scope;
  r.ranks = ranks;
  r.payload_bytes = payload_bytes;
  return r;
}

NetworkOptions custom_network(int64_t g, double intra_us, double intra_gbps, double inter_us,
                              double inter_gbps) {
  NetworkOptions o;
  o.preset = "custom";
  o.gpus_per_node = g;
  o.intra_latency_us = intra_us;
  o.intra_bandwidth_gbps = intra_gbps;
  o.inter_latency_us = inter_us;
  o.inter_bandwidth_gbps = inter_gbps;
  return o;
}

// α = 2 µs, B = 10^10 B/s (80 Gbps) inside a node; α = 8 µs, B = 10^9 B/s
// (8 Gbps) across nodes. Powers of two and tens keep the hand values exact.
constexpr double kAi = 2e-6, kBi = 1e10, kAe = 8e-6, kBe = 1e9;
constexpr int64_t kS = 4'000'000;  // bytes

}  // namespace

TEST_SUITE("network") {
  TEST_CASE("2 ranks, one node: every collective is one message's α + its bytes / B") {
    const Topology t = topo(1, 2, kAi, kBi, kAe, kBe);
    const double a = kAi, b = kBi, s = static_cast<double>(kS);
    // allreduce ring: 2(p−1)α = 2α, 2(p−1)/p = 1.
    CHECK(collective_time_s(rec("allreduce", "ring", 2, kS), t) == 2 * a + s / b);
    // tree (halving-doubling): 2⌈log2 2⌉α = 2α, the same bandwidth term.
    CHECK(collective_time_s(rec("allreduce", "tree", 2, kS), t) == 2 * a + s / b);
    // allgather / reduce-scatter / alltoall: (p−1)α + (p−1)/p · S/B = α + S/(2B).
    CHECK(collective_time_s(rec("allgather", "ring", 2, kS), t) == a + 0.5 * s / b);
    CHECK(collective_time_s(rec("reduce_scatter", "ring", 2, kS), t) == a + 0.5 * s / b);
    CHECK(collective_time_s(rec("alltoall", "pairwise", 2, kS), t) == a + 0.5 * s / b);
    // broadcast: ⌈log2 2⌉ = 1 message.
    CHECK(collective_time_s(rec("broadcast", "tree", 2, kS), t) == a + s / b);
    // The numbers: 2·2 µs + 4·10^6 / 10^10 s = 404 µs.
    CHECK(collective_time_s(rec("allreduce", "ring", 2, kS), t) == doctest::Approx(404e-6));
    // One rank talks to no one.
    CHECK(collective_time_s(rec("allreduce", "ring", 1, kS), t) == 0.0);
    CHECK(collective_time_s(rec("allgather", "ring", 1, kS), t) == 0.0);
  }

  TEST_CASE("4 ranks on one node: ring 6α + 1.5·S/B, tree 4α + 1.5·S/B") {
    const Topology t = topo(1, 4, kAi, kBi, kAe, kBe);
    const double s = static_cast<double>(kS);
    CHECK(collective_time_s(rec("allreduce", "ring", 4, kS), t) == 6 * kAi + 1.5 * s / kBi);
    CHECK(collective_time_s(rec("allreduce", "tree", 4, kS), t) == 4 * kAi + 1.5 * s / kBi);
    CHECK(collective_time_s(rec("allreduce", "ring", 4, kS), t) == doctest::Approx(612e-6));
    CHECK(collective_time_s(rec("allreduce", "tree", 4, kS), t) == doctest::Approx(608e-6));
    // allgather of S gathered in all: 3α + 0.75·S/B.
    CHECK(collective_time_s(rec("allgather", "ring", 4, kS), t) == 3 * kAi + 0.75 * s / kBi);
    // tree on 5 ranks: ⌈log2 5⌉ = 3 → 6α; bandwidth 2·4/5.
    CHECK(collective_time_s(rec("allreduce", "tree", 5, kS), t) == 6 * kAi + 1.6 * s / kBi);
    // The topology's own choice overrides what was logged.
    const Topology tree = topo(1, 4, kAi, kBi, kAe, kBe, "tree");
    CHECK(collective_time_s(rec("allreduce", "ring", 4, kS), tree) == 4 * kAi + 1.5 * s / kBi);
  }

  TEST_CASE("hierarchical allreduce on 2 nodes x 4: RS intra + AR inter + AG intra") {
    const double s = static_cast<double>(kS);
    const double rs = 3 * kAi + 0.75 * s / kBi;  // (g−1)α_i + (g−1)/g · S/B_i, g = 4
    const double ar = 2 * kAe + 1.0 * s / kBe;   // 2(N−1)α_e + 2(N−1)/N · S/B_e, N = 2
    const double hand = rs + ar + rs;
    const Topology logged = topo(2, 4, kAi, kBi, kAe, kBe);
    CHECK(collective_time_s(rec("allreduce", "hierarchical", 8, kS), logged) == hand);
    const Topology forced = topo(2, 4, kAi, kBi, kAe, kBe, "hierarchical");
    CHECK(collective_time_s(rec("allreduce", "ring", 8, kS), forced) == hand);
    // In numbers: rs = 6 + 300 µs, ar = 16 + 4000 µs.
    CHECK(hand == doctest::Approx(2 * 306e-6 + 4016e-6));
    // A hierarchical allreduce on a single node is a plain ring inside it.
    const Topology one = topo(1, 4, kAi, kBi, kAe, kBe, "hierarchical");
    CHECK(collective_time_s(rec("allreduce", "ring", 4, kS), one) == 6 * kAi + 1.5 * s / kBi);
  }

  TEST_CASE("a flat ring across nodes runs at inter latency and min(intra, inter) bandwidth") {
    const double s = static_cast<double>(kS);
    const Topology slow_nic = topo(2, 4, kAi, kBi, kAe, kBe);
    CHECK(collective_time_s(rec("allreduce", "ring", 8, kS), slow_nic) ==
          14 * kAe + 1.75 * s / kBe);
    // A NIC faster than the node's links: the intra bandwidth is the bottleneck.
    const Topology fast_nic = topo(2, 4, kAi, kBe, kAe, kBi);
    CHECK(collective_time_s(rec("allreduce", "ring", 8, kS), fast_nic) ==
          14 * kAe + 1.75 * s / kBe);
    CHECK(collective_time_s(rec("allgather", "ring", 8, kS), slow_nic) ==
          7 * kAe + 0.875 * s / kBe);
    // Scoped records: an intra collective on the node's links, an inter one on the NIC.
    CHECK(collective_time_s(rec("allgather", "ring", 4, kS, "fp32", "intra"), slow_nic) ==
          3 * kAi + 0.75 * s / kBi);
    CHECK(collective_time_s(rec("allgather", "ring", 2, kS, "fp32", "inter"), slow_nic) ==
          kAe + 0.5 * s / kBe);
    // An alltoall across nodes: the NIC carries g·S·(p−g)/p = 2S for the node.
    CHECK(collective_time_s(rec("alltoall", "pairwise", 8, kS), slow_nic) ==
          7 * kAe + 2.0 * s / kBe);
    // Inter records run by `groups` groups at once (LoCo's second stage: one
    // per local rank) share the NIC: 4 groups, each at kBe / 4.
    CommRecord shared = rec("alltoall", "pairwise", 2, kS, "int4", "inter");
    shared.groups = 4;
    CHECK(collective_time_s(shared, slow_nic) == kAe + 0.5 * s / (kBe / 4));
    // Intra records' groups are separate nodes: no sharing.
    CommRecord intra = rec("alltoall", "pairwise", 4, kS, "int4", "intra");
    intra.groups = 2;
    CHECK(collective_time_s(intra, slow_nic) == 3 * kAi + 0.75 * s / kBi);
  }

  TEST_CASE("more bandwidth or less latency is never slower (property, fixed seed)") {
    std::mt19937_64 gen(20240611);
    std::uniform_real_distribution<double> lat(1e-7, 1e-4), bw(1e8, 1e12), u(0.0, 1.0);
    const char* ops[] = {"allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast"};
    const char* algos[] = {"ring", "tree", "hierarchical"};
    const char* scopes[] = {"all", "intra", "inter"};
    const char* dtypes[] = {"fp32", "bits", "int4", "fp16"};
    const char* forced[] = {"as_logged", "ring", "tree", "hierarchical"};
    int checked = 0;
    for (int trial = 0; trial < 2000; ++trial) {
      const int g = 1 + static_cast<int>(gen() % 8), nodes = 1 + static_cast<int>(gen() % 4);
      const Topology t = topo(nodes, g, lat(gen), bw(gen), lat(gen), bw(gen), forced[gen() % 4]);
      std::vector<CommRecord> records;
      for (int k = 0, n = 1 + static_cast<int>(gen() % 5); k < n; ++k) {
        const char* scope = scopes[gen() % 3];
        const int p = std::string(scope) == "intra"   ? g
                      : std::string(scope) == "inter" ? nodes
                                                      : g * nodes;
        records.push_back(rec(ops[gen() % 5], algos[gen() % 3], p,
                              static_cast<int64_t>(gen() % 100'000'000), dtypes[gen() % 4], scope));
      }
      // One link parameter made better by a random factor.
      Topology better = t;
      const double f = 1.0 + 10.0 * u(gen);
      switch (gen() % 4) {
        case 0:
          better.intra_latency_s /= f;
          break;
        case 1:
          better.inter_latency_s /= f;
          break;
        case 2:
          better.intra_bytes_per_s *= f;
          break;
        default:
          better.inter_bytes_per_s *= f;
          break;
      }
      for (const auto& r : records) {
        CHECK(collective_time_s(r, better) <= collective_time_s(r, t));
        ++checked;
      }
      ComputeOptions c;
      c.overlap = u(gen);
      c.memory_bandwidth_gbytes_per_s = gen() % 2 ? 500.0 : 0.0;
      const std::vector<double> compute = {u(gen) * 1e-2, u(gen) * 1e-2};
      // price_step subtracts the hidden part from a sum: allow its rounding.
      const StepTime slow = price_step(records, t, compute, c);
      const StepTime fast = price_step(records, better, compute, c);
      CHECK(fast.step_s <= slow.step_s * (1 + 1e-12));
      CHECK(fast.comm_s <= slow.comm_s * (1 + 1e-12) + 1e-18);
    }
    CHECK(checked > 4000);
  }

  // price_step() once computed `exposed + overlappable - hidden`; when the
  // allreduce was fully hidden, (exposed + o) − o is not exactly `exposed`
  // and a faster link could come out one ulp slower. It now adds
  // (overlappable − hidden) first, which is exactly monotone.
  TEST_CASE("price_step is exactly monotone in the links") {
    std::mt19937_64 gen(7);
    std::uniform_real_distribution<double> lat(1e-7, 1e-4), bw(1e8, 1e12), u(0.0, 1.0);
    for (int trial = 0; trial < 2000; ++trial) {
      const Topology t = topo(2, 4, lat(gen), bw(gen), lat(gen), bw(gen));
      // The exposed alltoall runs on the NIC, the hidden allreduce inside the node.
      const std::vector<CommRecord> records = {
          rec("allreduce", "ring", 4, static_cast<int64_t>(gen() % 10'000'000), "fp32", "intra"),
          rec("alltoall", "pairwise", 2, static_cast<int64_t>(gen() % 100'000), "bits", "inter")};
      Topology better = t;
      better.intra_bytes_per_s *= 1.0 + u(gen);
      ComputeOptions c;
      c.overlap = 1.0;
      const std::vector<double> compute = {10.0};  // the allreduce is always fully hidden
      CHECK(price_step(records, better, compute, c).comm_s <=
            price_step(records, t, compute, c).comm_s);
    }
  }

  TEST_CASE("the 1-bit compressed allreduce pays four collectives' latency") {
    constexpr int kN = 8;
    constexpr size_t kDim = 1000;
    std::vector<float> data(kN * kDim), out(kDim);
    RngStream rng(3, Purpose::kTest);
    for (auto& v : data) v = static_cast<float>(rng.next_normal());
    Communicator comm(kN);
    comm.begin_step(1);
    OneBitAllreduce onebit(kN, kDim);
    onebit.run(comm, WorkerBuffers{data.data(), kDim, kDim, kN}, out);
    const auto& records = comm.log().records();
    REQUIRE(records.size() == 4);
    CHECK(std::string(records[0].op) == "alltoall");
    CHECK(std::string(records[1].op) == "allgather");
    CHECK(std::string(records[2].op) == "allgather");
    CHECK(std::string(records[3].op) == "allgather");

    // Bandwidth costs nothing: only the message rounds remain.
    const double inf = std::numeric_limits<double>::infinity();
    const double alpha = 5e-6;
    const ComputeOptions c;     // no compute, no overlap, no compression cost
    for (int nodes : {1, 8}) {  // all on one node, or one GPU per node
      const Topology t =
          nodes == 1 ? topo(1, kN, alpha, inf, 1.0, inf) : topo(kN, 1, 1.0, inf, alpha, inf);
      const StepTime st = price_step(records, t, {}, c);
      CHECK(st.comm_s == doctest::Approx(4.0 * (kN - 1) * alpha).epsilon(1e-12));
      // An uncompressed ring allreduce of the same vector: 2(p−1)α.
      const StepTime ring = price_step({rec("allreduce", "ring", kN, 4 * kDim)}, t, {}, c);
      CHECK(ring.comm_s == doctest::Approx(2.0 * (kN - 1) * alpha).epsilon(1e-12));
      CHECK(st.comm_s == doctest::Approx(2.0 * ring.comm_s).epsilon(1e-12));
    }
  }

  TEST_CASE("stragglers slow every step by exactly their excess") {
    ComputeOptions c;
    c.step_ms = 125;  // 0.125 s
    const double base = base_compute_s(c, 0, 0);
    CHECK(base == 0.125);
    ComputeOptions slow = c;
    slow.straggler_worker = 2;
    slow.straggler_factor = 3;
    const Topology t = topo(1, 4, kAi, kBi, kAe, kBe);
    const std::vector<CommRecord> records = {rec("allreduce", "ring", 4, kS),
                                             rec("alltoall", "pairwise", 4, kS / 32, "bits")};
    std::vector<double> w(4), ws(4);
    for (int64_t step = 1; step <= 50; ++step) {
      worker_compute_s(c, base, 9, step, w);
      worker_compute_s(slow, base, 9, step, ws);
      CHECK(w == std::vector<double>(4, base));
      CHECK(ws == std::vector<double>{base, base, 3 * base, base});
      const StepTime a = price_step(records, t, w, c);
      const StepTime b = price_step(records, t, ws, slow);
      CHECK(a.compute_s == base);
      CHECK(b.compute_s == 3 * base);
      CHECK(b.comm_s == a.comm_s);
      CHECK(b.step_s - a.step_s == doctest::Approx((3 - 1) * base).epsilon(1e-15));
      // With no records the difference is exact.
      CHECK(price_step({}, t, ws, slow).step_s - price_step({}, t, w, c).step_s == 2 * base);
    }
    // A straggler index beyond the workers changes nothing.
    slow.straggler_worker = 7;
    worker_compute_s(slow, base, 9, 1, ws);
    CHECK(ws == std::vector<double>(4, base));
  }

  TEST_CASE("jitter is deterministic per (seed, worker, step) with the stated relative std") {
    ComputeOptions c;
    c.step_ms = 10;
    c.jitter = 0.1;
    const double base = base_compute_s(c, 0, 0);
    std::vector<double> a(16), b(16), other_seed(16), four(4);
    worker_compute_s(c, base, 42, 7, a);
    worker_compute_s(c, base, 42, 7, b);
    worker_compute_s(c, base, 43, 7, other_seed);
    worker_compute_s(c, base, 42, 7, four);
    CHECK(a == b);
    CHECK(a != other_seed);
    for (int i = 0; i < 4; ++i) CHECK(four[i] == a[i]);  // keyed by worker, not by count
    for (int i = 1; i < 16; ++i) CHECK(a[i] != a[0]);

    // Relative deviation: mean 0, std `jitter` (32 000 draws).
    double sum = 0, sum2 = 0;
    int n = 0;
    for (int64_t step = 1; step <= 2000; ++step) {
      worker_compute_s(c, base, 42, step, a);
      for (double v : a) {
        const double rel = v / base - 1.0;
        sum += rel;
        sum2 += rel * rel;
        ++n;
      }
    }
    const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
    CHECK(std::fabs(mean) < 0.003);  // 5 standard errors: 5·0.1/√32000 ≈ 0.0028
    CHECK(sd == doctest::Approx(0.1).epsilon(0.02));
    // The step waits for the slowest worker.
    worker_compute_s(c, base, 42, 5, a);
    double slowest = 0;
    for (double v : a) slowest = std::max(slowest, v);
    CHECK(price_step({}, topo(1, 16, kAi, kBi, kAe, kBe), a, c).compute_s == slowest);
  }

  TEST_CASE("overlap hides an uncompressed allreduce up to overlap · 2/3 · compute, never bits") {
    const Topology t = topo(1, 4, kAi, kBi, kAe, kBe);
    ComputeOptions c;
    c.overlap = 0.5;
    const std::vector<double> compute = {0.3, 0.3, 0.3, 0.3};
    const double window = 0.5 * (2.0 / 3.0) * 0.3;  // 0.1 s of backward
    // Small: fully hidden.
    const CommRecord small = rec("allreduce", "ring", 4, kS);
    const double c_small = collective_time_s(small, t);
    REQUIRE(c_small < window);
    StepTime st = price_step({small}, t, compute, c);
    CHECK(st.comm_s == 0.0);
    CHECK(st.step_s == 0.3);
    // Large (1 GB): only the part beyond the window is exposed.
    const CommRecord large = rec("allreduce", "ring", 4, 1'000'000'000);
    const double c_large = collective_time_s(large, t);
    REQUIRE(c_large > window);
    st = price_step({large}, t, compute, c);
    CHECK(st.comm_s == c_large - window);
    CHECK(st.step_s == 0.3 + (c_large - window));
    // fp16/bf16 allreduces overlap too (DDP's compressed-hook-free buckets).
    CHECK(price_step({rec("allreduce", "ring", 4, kS, "fp16")}, t, compute, c).comm_s == 0.0);
    // Compressed ("bits") collectives, even an allreduce, are never hidden.
    const CommRecord bits = rec("alltoall", "pairwise", 4, kS / 32, "bits");
    CHECK(price_step({bits}, t, compute, c).comm_s == collective_time_s(bits, t));
    const CommRecord bits_ar = rec("allreduce", "ring", 4, kS / 32, "bits");
    CHECK(price_step({bits_ar}, t, compute, c).comm_s == collective_time_s(bits_ar, t));
    // Nor is an uncompressed allgather (the 1-bit family's scales).
    const CommRecord ag = rec("allgather", "ring", 4, 16);
    CHECK(price_step({ag}, t, compute, c).comm_s == collective_time_s(ag, t));
    // Mixed: bits exposed, fp32 hidden.
    CHECK(price_step({small, bits}, t, compute, c).comm_s ==
          doctest::Approx(collective_time_s(bits, t)).epsilon(1e-15));
    // No overlap: everything exposed.
    c.overlap = 0;
    CHECK(price_step({small}, t, compute, c).comm_s == c_small);
  }

  TEST_CASE("compression costs bytes touched / memory bandwidth, only for compressed dtypes") {
    // 16 bytes per element: encode reads input and error, writes error (12),
    // decode writes 4. Elements follow from the wire bytes and the bit width.
    CHECK(compression_bytes_touched(rec("alltoall", "pairwise", 4, 1000, "bits")) == 128000.0);
    CHECK(compression_bytes_touched(rec("allgather", "ring", 4, 1000, "int1")) == 128000.0);
    CHECK(compression_bytes_touched(rec("allgather", "ring", 4, 1000, "int4")) == 32000.0);
    CHECK(compression_bytes_touched(rec("allgather", "ring", 4, 1000, "int8")) == 16000.0);
    CHECK(compression_bytes_touched(rec("allreduce", "ring", 4, 1000, "fp32")) == 0.0);
    CHECK(compression_bytes_touched(rec("allreduce", "ring", 4, 1000, "fp16")) == 0.0);

    const Topology t = topo(1, 4, kAi, kBi, kAe, kBe);
    const CommRecord bits = rec("alltoall", "pairwise", 4, 1000, "bits");
    ComputeOptions c;
    c.memory_bandwidth_gbytes_per_s = 100;  // 10^11 B/s
    StepTime st = price_step({bits}, t, {}, c);
    CHECK(st.compression_s == 128000.0 / (100 * 1e9));
    CHECK(st.compression_s == doctest::Approx(1.28e-6));
    CHECK(st.comm_s == collective_time_s(bits, t) + st.compression_s);
    // fp32 touches nothing; bandwidth 0 switches the cost off.
    CHECK(price_step({rec("allreduce", "ring", 4, 1000)}, t, {}, c).compression_s == 0.0);
    c.memory_bandwidth_gbytes_per_s = 0;
    st = price_step({bits}, t, {}, c);
    CHECK(st.compression_s == 0.0);
    CHECK(st.comm_s == collective_time_s(bits, t));
  }

  TEST_CASE("compute time: step_ms, or 6 · params · samples / device FLOP/s") {
    ComputeOptions c;
    CHECK(base_compute_s(c, 1e6, 32) == 0.0);  // nothing given: no compute
    c.device_tflops = 100;
    CHECK(base_compute_s(c, 1e6, 32) == 6.0 * 1e6 * 32 / (100 * 1e12));
    c.model_params = 1e9;  // overrides the problem's dimension
    CHECK(base_compute_s(c, 1e6, 32) == doctest::Approx(6.0 * 1e9 * 32 / 1e14));
    c.step_ms = 250;  // wins over the derived time
    CHECK(base_compute_s(c, 1e6, 32) == 0.25);
  }

  TEST_CASE("every preset builds a topology; its fields are positive and documented") {
    REQUIRE(network_presets().size() >= 5);
    for (const char* name : {"ethernet_40g_v100x4", "infiniband_qdr_v100x8"}) {
      bool found = false;
      for (const auto& p : network_presets()) found = found || p.name == name;
      CHECK_MESSAGE(found, name);
    }
    for (const auto& p : network_presets()) {
      CAPTURE(p.name);
      NetworkOptions o = NetworkOptions::schema().read(Json{{"preset", p.name}}, "network");
      const Topology two = make_topology(o, 2 * p.gpus_per_node);
      CHECK(two.nodes == 2);
      CHECK(two.gpus_per_node == p.gpus_per_node);
      CHECK(two.intra_latency_s == doctest::Approx(p.intra_latency_us * 1e-6));
      CHECK(two.intra_bytes_per_s == doctest::Approx(p.intra_bandwidth_gbps * 1e9 / 8));
      CHECK(two.inter_latency_s == doctest::Approx(p.inter_latency_us * 1e-6));
      CHECK(two.inter_bytes_per_s == doctest::Approx(p.inter_bandwidth_gbps * 1e9 / 8));
      CHECK(two.intra_latency_s > 0);
      CHECK(two.inter_bytes_per_s > 0);
      CHECK(!two.source.empty());
      const Topology one = make_topology(o, 1);
      CHECK(one.nodes == 1);
      CHECK(one.gpus_per_node == 1);
      // An override replaces one value and keeps the rest.
      o.inter_bandwidth_gbps = 1.0;
      const Topology over = make_topology(o, 2 * p.gpus_per_node);
      CHECK(over.inter_bytes_per_s == 1e9 / 8);
      CHECK(over.intra_bytes_per_s == two.intra_bytes_per_s);
    }
    // The calibration facts of docs/algorithms.md §8.
    const Topology eth = make_topology(NetworkOptions{"ethernet_40g_v100x4"}, 16);
    CHECK(eth.gpus_per_node == 4);
    CHECK(eth.nodes == 4);
    CHECK(eth.inter_bytes_per_s == doctest::Approx(4.1e9 / 8));
    const Topology ib = make_topology(NetworkOptions{"infiniband_qdr_v100x8"}, 16);
    CHECK(ib.gpus_per_node == 8);
    CHECK(ib.inter_bytes_per_s == doctest::Approx(32e9 / 8));
  }

  TEST_CASE("a custom network converts its units") {
    const Topology t = make_topology(custom_network(4, 2, 80, 8, 8), 8);
    CHECK(t.nodes == 2);
    CHECK(t.gpus_per_node == 4);
    CHECK(t.intra_latency_s == doctest::Approx(2e-6));
    CHECK(t.intra_bytes_per_s == 1e10);
    CHECK(t.inter_bytes_per_s == 1e9);
    CHECK(t.source == "custom values");
  }

  TEST_CASE("bad networks are ConfigErrors naming network.<field>") {
    // An unknown preset, through the schema (what a config file goes through).
    CHECK(config_error_path([] {
            NetworkOptions::schema().read(Json{{"preset", "infiniband_qdr"}}, "network");
          }) == "network.preset");
    CHECK(config_error_message([] {
            NetworkOptions::schema().read(Json{{"preset", "infiniband_qdr_v100x9"}}, "network");
          }).find("did you mean \"infiniband_qdr_v100x8\"") != std::string::npos);
    // A custom network missing a value names it.
    NetworkOptions o = custom_network(4, 2, 80, 8, 8);
    o.inter_bandwidth_gbps = 0;
    CHECK(config_error_path([&] { make_topology(o, 8); }) == "network.inter_bandwidth_gbps");
    o = custom_network(4, 2, 80, 8, 8);
    o.intra_latency_us = 0;
    CHECK(config_error_path([&] { make_topology(o, 8); }) == "network.intra_latency_us");
    o = custom_network(0, 2, 80, 8, 8);
    CHECK(config_error_path([&] { make_topology(o, 8); }) == "network.gpus_per_node");
    // Workers not divisible by gpus_per_node.
    NetworkOptions p;
    p.preset = "infiniband_qdr_v100x8";
    CHECK(config_error_path([&] { make_topology(p, 12); }) == "network.gpus_per_node");
    CHECK(config_error_message([&] { make_topology(p, 12); }).find("12") != std::string::npos);
    CHECK(config_error_path([&] { make_topology(p, 16); }) == "(no error)");
    CHECK(config_error_path([&] { make_topology(p, 5); }) == "(no error)");  // one node of 5
    // Schema rules on the values.
    CHECK(config_error_path([] {
            NetworkOptions::schema().read(Json{{"preset", "custom"}, {"inter_latency_us", -1}},
                                          "network");
          }) == "network.inter_latency_us");
    CHECK(config_error_path([] {
            NetworkOptions::schema().read(Json{{"allreduce", "butterfly"}}, "network");
          }) == "network.allreduce");
    CHECK(config_error_path([] {
            ComputeOptions::schema().read(Json{{"overlap", 1.5}}, "compute");
          }) == "compute.overlap");
  }

  // make_topology() must name network.preset for a name it does not know
  // (it once treated any unknown name as "custom").
  TEST_CASE("make_topology rejects an unknown preset by name") {
    NetworkOptions o = custom_network(4, 2, 80, 8, 8);
    o.preset = "infiniband_qdr";
    CHECK(config_error_path([&] { make_topology(o, 8); }) == "network.preset");
    NetworkOptions bare;
    bare.preset = "infiniband_qdr";
    CHECK(config_error_path([&] { make_topology(bare, 8); }) == "network.preset");
  }

  TEST_CASE("algbw / busbw factors are the standard ones") {
    CHECK(bus_factor(rec("allreduce", "ring", 8, kS)) == 2.0 * 7 / 8);
    CHECK(bus_factor(rec("allreduce", "tree", 2, kS)) == 1.0);
    CHECK(bus_factor(rec("allgather", "ring", 8, kS)) == 7.0 / 8);
    CHECK(bus_factor(rec("reduce_scatter", "ring", 4, kS)) == 3.0 / 4);
    CHECK(bus_factor(rec("alltoall", "pairwise", 4, kS)) == 3.0 / 4);
    CHECK(bus_factor(rec("broadcast", "tree", 4, kS)) == 1.0);
    CHECK(bus_factor(rec("allreduce", "ring", 1, kS)) == 0.0);
    // Without latency, a ring's busbw = algbw · factor is the link bandwidth
    // (NCCL's definition: busbw does not depend on p).
    for (int p : {2, 3, 4, 8}) {
      const Topology t = topo(1, p, 0.0, kBi, 0.0, kBe);
      for (const char* op : {"allreduce", "allgather", "reduce_scatter", "alltoall"}) {
        const CommRecord r = rec(op, "ring", p, kS);
        const double algbw = static_cast<double>(kS) / collective_time_s(r, t);
        CHECK(algbw * bus_factor(r) == doctest::Approx(kBi));
      }
    }
  }
}
