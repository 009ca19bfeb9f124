#include <doctest/doctest.h>

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "sim/cluster/cluster.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "problems/problem.hpp"
#include "tests/fixtures.hpp"

using namespace bitlab;
using bitlab::testing::ToyProblem;

namespace {
ClusterOptions opts(int64_t workers, std::string sharding, int64_t batch = 8) {
  ClusterOptions o;
  o.workers = workers;
  o.sharding = std::move(sharding);
  o.batch_size = {false, batch};
  return o;
}
std::string error_of(const Problem& p, const ClusterOptions& o) {
  try {
    make_shards(p, o, 1);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("cluster") {
  TEST_CASE("iid and contiguous shards partition the data in near-equal parts") {
    ToyProblem p(4, 103, 3);
    for (const char* mode : {"iid", "contiguous"}) {
      auto shards = make_shards(p, opts(5, mode), 1);
      std::vector<uint32_t> all;
      for (const auto& s : shards) {
        CHECK((s.size() == 20 || s.size() == 21));
        all.insert(all.end(), s.begin(), s.end());
      }
      std::sort(all.begin(), all.end());
      for (uint32_t j = 0; j < 103; ++j) REQUIRE(all[j] == j);
    }
    auto c = make_shards(p, opts(5, "contiguous"), 1);
    CHECK(c[0].front() == 0);
    CHECK(c[1].front() == c[0].back() + 1);
    // iid depends on the seed
    CHECK(make_shards(p, opts(5, "iid"), 1)[0] != make_shards(p, opts(5, "iid"), 2)[0]);
  }

  TEST_CASE("label_skew with a small alpha gives workers few classes; all data used") {
    ToyProblem p(4, 2000, 10);
    auto o = opts(8, "label_skew");
    o.dirichlet_alpha = 0.1;
    auto skewed = make_shards(p, o, 3);
    o.dirichlet_alpha = 1000.0;
    auto even = make_shards(p, o, 3);
    auto mean_classes = [&](const std::vector<std::vector<uint32_t>>& shards) {
      double total = 0;
      size_t count = 0;
      for (const auto& s : shards) {
        std::set<int> cls;
        // classes holding at least 5% of the shard
        std::vector<int> per(10, 0);
        for (uint32_t j : s) ++per[p.train_labels()[j]];
        for (int c = 0; c < 10; ++c)
          if (per[c] * 20 >= static_cast<int>(s.size())) cls.insert(c);
        total += cls.size();
        count += s.size();
      }
      CHECK(count == 2000);
      return total / shards.size();
    };
    // Dir(0.1) over 8 workers concentrates each class on ~1-2 workers, so a
    // worker sees few classes; Dir(1000) is nearly uniform: all 10 classes.
    CHECK(mean_classes(skewed) < 5.0);
    CHECK(mean_classes(even) == 10.0);
  }

  TEST_CASE("sharding errors name the field and the rule") {
    ToyProblem p(4, 10, 2);
    CHECK(error_of(p, opts(11, "iid")) ==
          "cluster.workers = 11: must be <= the problem's 10 training samples (every worker "
          "needs a shard)");
    auto o = opts(10, "label_skew");
    o.dirichlet_alpha = 0.01;
    CHECK(error_of(p, o).find("cluster.dirichlet_alpha = 0.01: leaves worker") == 0);
    // replicated: every worker holds everything, even more workers than samples
    auto r = make_shards(p, opts(16, "replicated"), 1);
    CHECK(r[15].size() == 10);
  }

  TEST_CASE("batches walk through a fresh permutation of the shard every epoch") {
    std::vector<uint32_t> shard{3, 5, 7, 9, 11, 13, 15};
    BatchSampler s(shard, {false, 3}, 42, 0);
    std::vector<uint32_t> b, seen;
    for (int step = 1; step <= 7; ++step) {  // 21 draws = 3 epochs of 7
      s.sample(step, b);
      seen.insert(seen.end(), b.begin(), b.end());
    }
    for (int e = 0; e < 3; ++e) {
      std::vector<uint32_t> epoch(seen.begin() + 7 * e, seen.begin() + 7 * e + 7);
      std::sort(epoch.begin(), epoch.end());
      CHECK(epoch == shard);
    }
    // Deterministic and random access: a new sampler asked for step 5 agrees.
    BatchSampler t(shard, {false, 3}, 42, 0);
    std::vector<uint32_t> b5;
    t.sample(5, b5);
    CHECK(std::vector<uint32_t>(seen.begin() + 12, seen.begin() + 15) == b5);
    // full batch = the shard itself
    BatchSampler f(shard, {true, 0}, 42, 0);
    f.sample(9, b);
    CHECK(b == shard);
    // a batch larger than the shard spans epochs
    BatchSampler big(shard, {false, 10}, 1, 0);
    big.sample(1, b);
    CHECK(b.size() == 10);
  }

  TEST_CASE("local parameter copies start from the shared ones") {
    ToyProblem p(5, 16, 2);
    Cluster c(opts(3, "iid", 4), p, 1);
    CHECK(!c.has_local_params());
    CHECK(c.params(2).data() == c.params().data());
    c.enable_local_params();
    CHECK(c.has_local_params());
    CHECK(c.params(2).data() != c.params().data());
    CHECK(c.params(2)[4] == 1.0f);
    c.compute_gradients(1);
    CHECK(c.grad(0)[1] == 2.0f);  // g_1 = x_1 (1 + 1)
  }

  TEST_CASE("a block of workers holds only its own per-worker buffers, with the same gradients") {
    // What an MPI rank owning workers [2, 4) of 8 allocates: a quarter of
    // the simulator's gradient / local-parameter / 1-bit allreduce arrays.
    ToyProblem p(5, 64, 2);
    Cluster all(opts(8, "iid", 4), p, 1);
    Cluster block(opts(8, "iid", 4), p, 1, WorkerRange{2, 4});
    all.enable_local_params();
    block.enable_local_params();
    CHECK(all.worker_buffer_bytes() == 2 * 8 * all.stride() * sizeof(float));
    CHECK(block.worker_buffer_bytes() == 2 * 2 * block.stride() * sizeof(float));
    CHECK(block.grads().first == 2);
    CHECK(block.grads().resident_count() == 2);
    all.compute_gradients(3);
    block.compute_gradients(3);
    for (int i = 2; i < 4; ++i) {
      CAPTURE(i);
      CHECK(std::equal(all.grad(i).begin(), all.grad(i).end(), block.grad(i).begin()));
      CHECK(block.loss(i) == all.loss(i));
    }
    const OneBitAllreduce full(8, 1000), part(8, 1000, 0, WorkerRange{2, 4});
    CHECK(part.resident_bytes() * 4 == full.resident_bytes());
    // Per worker: D error floats + D/8 sign bytes; per server: 2·D/n floats.
    const size_t D = full.padded_dim();
    CHECK(part.resident_bytes() == 2 * (D * 4 + D / 8) + 2 * 2 * (D / 8) * 4);
  }

  TEST_CASE("a streamed cluster's mean is mean_over_workers' over the rows, bit for bit") {
    // The noisy quadratic (σ = 1, κ = 100): every worker's gradient differs,
    // so a node summed in another order gives other bits. d = 5000 spans
    // three of the tree's 2048-element chunks, the last one partial. n covers
    // rows that fit in the threads' blocks at once (the rows path: 1, 3, 16,
    // and 37, 64 on 8 threads) and trees of blocks with levels above them
    // (17 on 1 thread, 37, 64 and 100), frontiers cut at depth 0 to 3 (1, 2,
    // 3, 5 and 8 threads).
    const auto* entry = find_entry(problem_registry(), "quadratic");
    REQUIRE(entry != nullptr);
    const Json raw = {{"name", "quadratic"}, {"dim", 5000}, {"noise", 1.0},
                      {"condition_number", 100.0}};
    const auto problem = entry->make(entry->resolve(raw, "problem"), DataScope{});
    const int threads_before = omp_get_max_threads();
    for (const int n : {1, 3, 16, 17, 37, 64, 100}) {
      Cluster rows(opts(n, "iid"), *problem, 7);
      rows.compute_gradients(5);
      for (const WireDtype wire : {WireDtype::kFp32, WireDtype::kFp16, WireDtype::kBf16}) {
        std::vector<float> want(problem->dim()), want32(problem->dim());
        mean_over_workers(rows.grads(), want, wire);
        mean_over_workers(rows.grads(), want32, WireDtype::kFp32);
        for (const int threads : {1, 2, 3, 5, 8}) {
          CAPTURE(n);
          CAPTURE(wire_dtype_name(wire));
          CAPTURE(threads);
          omp_set_num_threads(threads);
          Cluster streamed(opts(n, "iid"), *problem, 7, {}, StreamedMean{wire, true});
          streamed.compute_gradient_mean(5, true);
          const auto got = streamed.streamed_mean(wire);
          CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
          const auto got32 = streamed.streamed_mean(WireDtype::kFp32);
          CHECK(std::memcmp(got32.data(), want32.data(), want32.size() * sizeof(float)) == 0);
          for (int i = 0; i < n; ++i) CHECK(streamed.loss(i) == rows.loss(i));
          // Without the fp32 request only the wire's mean is folded.
          streamed.compute_gradient_mean(5, false);
          if (wire != WireDtype::kFp32) {
            CHECK_THROWS_AS(streamed.streamed_mean(WireDtype::kFp32), std::logic_error);
          }
          CHECK_THROWS_AS(streamed.grads(), std::logic_error);
        }
        omp_set_num_threads(threads_before);
      }
    }
  }

  TEST_CASE("a streamed cluster holds log n rows, not n") {
    // 4096 workers of d = 1000: rows would be 4096 × 1008 floats; the
    // streamed mean holds per thread a 16-row block and one partial sum per
    // tree level above the blocks, plus the frontier's nodes and the mean.
    ToyProblem p(1000, 8192, 2);
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(2);
    Cluster streamed(opts(4096, "iid", 1), p, 1, {}, StreamedMean{});
    omp_set_num_threads(threads_before);
    const size_t row = streamed.stride() * sizeof(float);
    // 2 threads: frontier [0, 2048) and [2048, 4096); levels: 2048 halves to
    // 16 in 7 steps. Blocks 2·16 rows, partial sums 2·7, nodes 2, mean 1000 floats.
    CHECK(streamed.worker_buffer_bytes() == (2 * 16 + 2 * 7 + 2) * row + 1000 * sizeof(float));
    CHECK(streamed.memory_lower_bound() == streamed.worker_buffer_bytes() + 1000 * sizeof(float));
    Cluster rows(opts(4096, "iid", 1), p, 1);
    CHECK(rows.worker_buffer_bytes() == 4096 * row);
  }

  TEST_CASE("a streamed cluster's blocks shrink to a share of a large optimizer state") {
    // 4096 workers of d = 1000 on 2 threads, frontier [0, 2048) and
    // [2048, 4096). Blocks of b rows a thread need 2048 → b in
    // ceil(log2(2048 / b)) halvings: 7 levels at 16 rows, 8 at 8, 9 at 4.
    ToyProblem p(1000, 8192, 2);
    const int threads_before = omp_get_max_threads();
    omp_set_num_threads(2);
    const auto held = [&](uint64_t optimizer_bytes, int max_rows = 16) {
      StreamedMean sm;
      sm.max_block_rows = max_rows;
      Cluster c(opts(4096, "iid", 1), p, 1, {}, sm, optimizer_bytes);
      return c.worker_buffer_bytes();
    };
    const size_t row = Cluster(opts(1, "iid", 1), p, 1).stride() * sizeof(float);
    const auto expect = [&](int b, int levels) {
      return (2 * b + 2 * levels + 2) * row + 1000 * sizeof(float);
    };
    const uint64_t blocks8 = 2 * 8 * row;  // both threads' blocks at 8 rows
    // A state smaller than the full blocks (Adam's m and v): 16 rows.
    CHECK(held(3 * row) == expect(16, 7));
    // A state of 32 × the 8-row blocks: 8 rows; a byte less: 4, the floor.
    CHECK(held(32 * blocks8) == expect(8, 8));
    CHECK(held(32 * blocks8 - 1) == expect(4, 9));
    CHECK(held(32 * 2 * 16 * row) == expect(16, 7));  // 32 × the full blocks
    CHECK(held(1 << 20, 4) == expect(4, 9));  // below the floor only when asked
    CHECK(held(3 * row, 2) == expect(2, 10));
    StreamedMean none;
    none.max_block_rows = 0;
    CHECK_THROWS_AS(Cluster(opts(64, "iid", 1), p, 1, {}, none), std::logic_error);
    omp_set_num_threads(threads_before);
  }

  TEST_CASE("a streamed cluster's mean has the same bits whatever its block rows") {
    const auto* entry = find_entry(problem_registry(), "quadratic");
    REQUIRE(entry != nullptr);
    const Json raw = {{"name", "quadratic"}, {"dim", 3000}, {"noise", 1.0}};
    const auto problem = entry->make(entry->resolve(raw, "problem"), DataScope{});
    const int threads_before = omp_get_max_threads();
    for (const int n : {37, 100}) {
      Cluster rows(opts(n, "iid"), *problem, 3);
      rows.compute_gradients(2);
      std::vector<float> want(problem->dim());
      mean_over_workers(rows.grads(), want, WireDtype::kFp16);
      for (const int threads : {1, 3}) {
        omp_set_num_threads(threads);
        for (const int b : {1, 2, 3, 5, 8, 16}) {
          CAPTURE(n);
          CAPTURE(threads);
          CAPTURE(b);
          StreamedMean sm{WireDtype::kFp16};
          sm.max_block_rows = b;
          Cluster streamed(opts(n, "iid"), *problem, 3, {}, sm);
          streamed.compute_gradient_mean(2, false);
          const auto got = streamed.streamed_mean(WireDtype::kFp16);
          CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
      }
    }
    omp_set_num_threads(threads_before);
  }
}
