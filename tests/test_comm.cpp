#include <doctest/doctest.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/core/rng.hpp"
#include "tests/bits.hpp"

using namespace bitlab;

namespace {
using bitlab::testing::bit_equal;
// n buffers of len values drawn from N(0, 1) (stride padded to 16 floats).
struct Buffers {
  std::vector<float> data;
  WorkerBuffers view;
  Buffers(int n, size_t len, uint64_t seed) {
    const size_t stride = (len + 15) / 16 * 16;
    data.assign(stride * n, 0.0f);
    view = {data.data(), stride, len, n};
    for (int i = 0; i < n; ++i) fill_normal(RngStream(seed, Purpose::kTest, i), view[i], 1.0f);
  }
};
}  // namespace

TEST_SUITE("comm") {
  TEST_CASE("mean of n identical buffers is that buffer, exactly, for n a power of two") {
    for (int n : {1, 2, 4, 8, 16, 64}) {
      Buffers b(n, 5000, 1);
      for (int i = 1; i < n; ++i) std::copy(b.view[0].begin(), b.view[0].end(), b.view[i].begin());
      std::vector<float> out(5000), first(b.view[0].begin(), b.view[0].end());
      mean_over_workers(b.view, out, WireDtype::kFp32);
      CHECK(bit_equal(out, first));
    }
  }

  TEST_CASE("mean is the fixed pairwise tree, whatever the thread count") {
    Buffers b(13, 100003, 2);  // odd sizes: chunks and tree both uneven
    std::vector<float> one(100003), two(100003);
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    mean_over_workers(b.view, one, WireDtype::kFp32);
    omp_set_num_threads(2);
    mean_over_workers(b.view, two, WireDtype::kFp32);
    omp_set_num_threads(saved);
    CHECK(bit_equal(one, two));
    // and it is the tree ((0..5)+(6..12)) with halves split the same way, in float
    auto tree = [&](auto& self, int lo, int hi, size_t k) -> float {
      if (hi - lo == 1) return b.view[lo][k];
      const int mid = lo + (hi - lo) / 2;
      return self(self, lo, mid, k) + self(self, mid, hi, k);
    };
    for (size_t k : {size_t{0}, size_t{4097}, size_t{100002}}) {
      CHECK(one[k] == tree(tree, 0, 13, k) / 13.0f);
    }
  }

  TEST_CASE("streamed_mean is mean_over_workers bit for bit, with ceil(log2 n) rows of scratch") {
    // Uneven n (tree halves of unequal size) and a length past the parallel
    // threshold; the rows are filled one at a time from a copy, as a rank
    // decoding received images would.
    for (int n : {1, 2, 3, 5, 8, 13}) {
      CAPTURE(n);
      const size_t len = 20011;
      Buffers b(n, len, 7);
      std::vector<float> want(len), got(len, -1.0f), scratch;
      mean_over_workers(b.view, want, WireDtype::kFp32);
      int filled = 0;
      streamed_mean(
          n, len,
          [&](int i, std::span<float> dst) {
            CHECK(i == filled++);  // each row once, in worker order
            std::copy(b.view[i].begin(), b.view[i].end(), dst.begin());
          },
          got, scratch);
      CHECK(filled == n);
      CHECK(bit_equal(got, want));
      int levels = 0;
      while ((1 << levels) < n) ++levels;
      CHECK(scratch.size() == static_cast<size_t>(levels) * len);
    }
  }

  TEST_CASE("fp16 and bf16 wires round inputs and result") {
    Buffers b(4, 1000, 3);
    std::vector<float> out(1000);
    mean_over_workers(b.view, out, WireDtype::kFp16);
    for (size_t k = 0; k < 1000; k += 37) {
      const float s = (round_to_half(b.view[0][k]) + round_to_half(b.view[1][k])) +
                      (round_to_half(b.view[2][k]) + round_to_half(b.view[3][k]));
      CHECK(out[k] == round_to_half(s / 4.0f));
    }
    mean_over_workers(b.view, out, WireDtype::kBf16);
    for (size_t k = 0; k < 1000; k += 37) CHECK(out[k] == round_to_bf16(out[k]));
  }

  TEST_CASE("byte and message counts of the standard collectives") {
    Communicator comm(4);
    Buffers b(4, 1000, 4);
    std::vector<float> out(4000);
    comm.begin_step(7);
    comm.allreduce_mean(b.view, out, WireDtype::kFp32);
    comm.allreduce_mean(b.view, out, WireDtype::kFp16, "tree");
    comm.allgather(b.view, out, WireDtype::kFp32);
    comm.broadcast(b.view, 2, WireDtype::kBf16);
    const auto& r = comm.log().records();
    REQUIRE(r.size() == 4);
    // ring allreduce, fp32, d = 1000: S = 4000 B, 2(p-1)/p S = 6000 B, 2(p-1) = 6 rounds
    CHECK(r[0].step == 7);
    CHECK(std::string(r[0].op) == "allreduce");
    CHECK(r[0].payload_bytes == 4000);
    CHECK(r[0].sent_bytes == 6000.0);
    CHECK(r[0].messages == 6);
    // tree allreduce, fp16: S = 2000 B, 3000 B sent, 2 log2(4) = 4 rounds
    CHECK(r[1].payload_bytes == 2000);
    CHECK(r[1].sent_bytes == 3000.0);
    CHECK(r[1].messages == 4);
    // ring allgather: S = total gathered = 16000 B, (p-1)/p S = 12000, p-1 rounds
    CHECK(r[2].payload_bytes == 16000);
    CHECK(r[2].sent_bytes == 12000.0);
    CHECK(r[2].messages == 3);
    // broadcast (binomial tree), bf16 S = 2000 B: (p-1)/p S averaged, log2 p rounds
    CHECK(r[3].sent_bytes == 1500.0);
    CHECK(r[3].messages == 2);
    // allgather result is every buffer in order; broadcast made all equal root
    for (int i = 0; i < 4; ++i) CHECK(b.view[i][5] == round_to_bf16(b.view[2][5]));
  }

  TEST_CASE("one worker sends nothing") {
    Communicator comm(1);
    Buffers b(1, 10, 5);
    std::vector<float> out(10);
    comm.allreduce_mean(b.view, out, WireDtype::kFp32);
    CHECK(comm.log().records()[0].sent_bytes == 0.0);
    CHECK(comm.log().records()[0].messages == 0);
    CHECK(out[3] == b.view[0][3]);
  }

  TEST_CASE("tree_mean of doubles") {
    std::vector<double> v{1.0, 2.0, 3.0, 4.0, 5.0};
    CHECK(tree_mean(v) == doctest::Approx(3.0));
    CHECK(tree_mean(std::vector<double>{}) == 0.0);
  }
}
