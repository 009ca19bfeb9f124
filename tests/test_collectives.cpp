// Compressed collectives beyond the 1-bit allreduce: allgather-based
// compressed averaging (flat and hierarchical) and LoCo's quantized
// reduce-scatter + allgather. Each test names the statement it checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "sim/collectives/compressed_collectives.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/core/rng.hpp"
#include "tests/bits.hpp"

using namespace bitlab;

namespace {
using bitlab::testing::bit_equal;

struct Inputs {
  std::vector<float> data;
  WorkerBuffers view;
  Inputs(int n, size_t d, uint64_t seed) {
    const size_t stride = (d + 15) / 16 * 16;
    data.assign(stride * n, 0.0f);
    view = {data.data(), stride, d, n};
    for (int i = 0; i < n; ++i) fill_normal(RngStream(seed, Purpose::kTest, i), view[i], 1.0f);
  }
};

std::shared_ptr<const Compressor> compressor(const char* json) {
  return std::shared_ptr<const Compressor>(make_compressor(Json::parse(json), "c"));
}

double total_sent(const Communicator& c) {
  double s = 0;
  for (const auto& r : c.log().records()) s += r.sent_bytes;
  return s;
}

}  // namespace

TEST_SUITE("collectives") {
  TEST_CASE("allgather mean with the identity compressor is the exact mean") {
    const int n = 5;
    const size_t d = 1001;
    Inputs in(n, d, 1);
    CompressedAllgatherMean cam(n, d, compressor(R"({"name": "identity"})"));
    Communicator comm(n);
    std::vector<float> out(d), exact(d);
    cam.run(comm, in.view, out, 1, 1);
    mean_over_workers(in.view, exact, WireDtype::kFp32);
    CHECK(bit_equal(out, exact));
    // one allgather of n images of 4d bytes: (n-1)·4d sent per worker
    CHECK(total_sent(comm) == (n - 1) * 4.0 * d);
  }

  TEST_CASE("allgather mean with the sign compressor averages C(x_i); exact byte counts") {
    for (int n : {1, 2, 3, 8}) {
      for (size_t d : {size_t{1}, size_t{7}, size_t{8} * n - 1, size_t{1000}}) {
        CAPTURE(n);
        CAPTURE(d);
        Inputs in(n, d, 2);
        auto c = compressor(R"({"name": "sign"})");
        CompressedAllgatherMean cam(n, d, c);
        Communicator comm(n);
        std::vector<float> out(d);
        cam.run(comm, in.view, out, 1, 1);
        // each worker's image: ceil(d/8) sign bytes + one fp32 scale
        const double wire = static_cast<double>((d + 7) / 8 + 4);
        CHECK(total_sent(comm) == (n - 1) * wire);
        // out = mean_i C(x_i), recomputed independently
        std::vector<float> ci(d);
        std::vector<double> expect(d, 0.0);
        for (int i = 0; i < n; ++i) {
          c->apply(in.view[i], ci, RngStream(1, Purpose::kCompress, i, 1));
          CHECK(bit_equal(ci, cam.compressed()[i]));
          for (size_t k = 0; k < d; ++k) expect[k] += ci[k];
        }
        // the communicator's tree vs a double sum: fp32 rounding of n terms
        for (size_t k = 0; k < d; ++k) {
          CHECK(out[k] == doctest::Approx(expect[k] / n).epsilon(1e-6));
        }
      }
    }
  }

  TEST_CASE("hierarchical allgather mean: identity equals the flat mean; bytes by stage") {
    const int n = 8, g = 4;
    const size_t d = 999;
    Inputs in(n, d, 3);
    CompressedAllgatherMean flat(n, d, compressor(R"({"name": "identity"})"));
    CompressedAllgatherMean hier(n, d, compressor(R"({"name": "identity"})"), g);
    CHECK(hier.hierarchical());
    Communicator c1(n), c2(n);
    std::vector<float> a(d), b(d);
    flat.run(c1, in.view, a, 1, 1);
    hier.run(c2, in.view, b, 1, 1);
    // powers of two: node means then the mean of nodes is the same tree
    CHECK(bit_equal(a, b));
    const auto& r = c2.log().records();
    REQUIRE(r.size() == 3);
    const double wire = 4.0 * d;
    CHECK(std::string(r[0].scope) == "intra");
    CHECK(r[0].sent_bytes == (g - 1) * wire);  // allgather of g images in a node
    CHECK(std::string(r[1].scope) == "inter");
    CHECK(r[1].ranks == 2);
    CHECK(r[1].sent_bytes == 1 * wire);  // ONE image per node crosses the network
    CHECK(std::string(r[2].op) == "broadcast");
    CHECK(r[2].sent_bytes == (g - 1.0) / g * 2 * wire);
  }

  TEST_CASE("binarize, hierarchical: one bit-vector per node crosses the network") {
    const int n = 8, g = 4;
    const size_t d = 1000;
    Inputs in(n, d, 4);
    for (float& v : in.data) v = std::tanh(v);  // z in [-1, 1]
    CompressedAllgatherMean hier(n, d, compressor(R"({"name": "binarize"})"), g);
    Communicator comm(n);
    std::vector<float> out(d);
    hier.run(comm, in.view, out, 7, 3);
    CHECK(comm.log().records()[1].payload_bytes == 2 * static_cast<int64_t>((d + 7) / 8));
    // mean of 2 node bit-vectors: every value is -1, 0 or +1
    for (float v : out) CHECK((v == -1.0f || v == 0.0f || v == 1.0f));
  }

  TEST_CASE("quantized reduce-scatter: out = mean_i Q(x_i) (fp32 gather); bytes closed form") {
    for (int n : {1, 2, 3, 4}) {
      for (size_t d : {size_t{1}, size_t{7}, size_t{255}, size_t{1000}}) {
        CAPTURE(n);
        CAPTURE(d);
        QuantizeSpec spec;
        spec.bits = 4;
        spec.group_size = 32;
        Inputs in(n, d, 5);
        QuantizedReduceScatter q(n, d, spec, "fp32");
        CHECK(q.padded_dim() % (n * 32) == 0);
        Communicator comm(n);
        std::vector<float> out(d);
        q.run(comm, in.view, out, 1, 1);
        const size_t D = q.padded_dim(), chunk = D / n;
        std::vector<double> expect(d, 0.0);
        for (int i = 0; i < n; ++i) {
          std::vector<float> padded(D, 0.0f), qi(D);
          std::copy(in.view[i].begin(), in.view[i].end(), padded.begin());
          quantize_dequantize(padded, qi, spec, RngStream(1, Purpose::kCompress, i, 1));
          for (size_t k = 0; k < d; ++k) {
            CHECK(qi[k] == q.quantized()[i][k]);
            expect[k] += qi[k];
          }
        }
        for (size_t k = 0; k < d; ++k)
          CHECK(out[k] == doctest::Approx(expect[k] / n).epsilon(1e-6));
        // codes: chunk·4 bits + one fp32 scale per group of 32, both ways
        const double wire1 = chunk * 4 / 8.0 + 4.0 * (chunk / 32);
        CHECK(total_sent(comm) == (n - 1) * (wire1 + 4.0 * chunk));
        CHECK(total_sent(comm) == q.sent_bytes_per_call());
      }
    }
  }

  TEST_CASE("quantized reduce-scatter with a quantized gather; zero in => zero out") {
    const int n = 4;
    const size_t d = 500;
    QuantizeSpec spec;  // 4 bits, groups of 128
    QuantizedReduceScatter q(n, d, spec);
    Communicator comm(n);
    Inputs zero(n, d, 6);
    std::fill(zero.data.begin(), zero.data.end(), 0.0f);
    std::vector<float> out(d, 1.0f);
    q.run(comm, zero.view, out, 1, 1);
    for (float v : out) CHECK(v == 0.0f);
    const double wire = static_cast<double>(quantize_wire_bytes(q.padded_dim() / n, spec));
    CHECK(total_sent(comm) == 2 * (n - 1) * wire);
  }
}
