// Pieces shared by the optimizers: the `wire` option of an uncompressed
// allreduce, and the one call that averages the workers' gradients.
#pragma once

#include <span>
#include <string>

#include "optimizers/optimizer.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

inline constexpr const char* kWireDoc =
    "element type of the gradient allreduce on the wire: fp32, fp16 or bf16 (each worker's "
    "gradient and the mean are rounded to it; the sum is accumulated in fp32)";

// Adds the `wire` field (std::string Options::wire, default "fp32") to a
// schema. Every options struct that allreduces in full precision has one.
template <class Options>
void add_wire_field(Schema<Options>& s) {
  s.field("wire", &Options::wire, kWireDoc, {rules::one_of({"fp32", "fp16", "bf16"})});
}

// ḡ = mean_i g_i: the exact (up to the wire type) ring allreduce of every
// worker's gradient. The communicator does the arithmetic and counts the
// bytes; this is the only place a baseline optimizer combines gradients.
inline void allreduce_gradients(StepContext& ctx, std::span<float> g_mean, WireDtype wire) {
  ctx.comm.allreduce_mean(ctx.cluster.grads(), g_mean, wire, "ring");
}

// Number of elements above which an elementwise loop is worth a parallel
// region. Each element is independent, so the result is bit-identical for
// any thread count either way; this only avoids fork/join on tiny tensors.
inline constexpr int64_t kParallelMinElements = 4096;

}  // namespace bitlab
