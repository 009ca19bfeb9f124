// The compressor of each stage of the compressed allreduce (docs/algorithms.md
// §1, "Compressor per stage"): the `worker_compressor` and `server_compressor`
// options of 1-bit Adam, APMSqueeze, 1-bit LAMB and 0/1 Adam.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

// A nested options object read by someone else (a compressor's {"name": ...}):
// only its shape is checked here (make_onebit_stages reads it).
template <>
struct JsonCodec<Json> {
  static const char* type_name() { return "object"; }
  static Json read(const Json& j, std::string_view path) {
    if (!j.is_object()) config_fail(path, j, "must be a JSON object");
    return j;
  }
  static Json write(const Json& v) { return v; }
};

inline constexpr const char* kStageCompressorDoc =
    "{\"name\": <compressor>, its options..., \"error_feedback\": bool}: the compressor of this "
    "stage of the compressed allreduce (docs/algorithms.md §1). Default {\"name\": \"sign\"} at "
    "both stages is the paper's scaled sign (one RMS scale per worker buffer and per server "
    "chunk); any other combination compresses every chunk as its own image (sign then has one "
    "scale per chunk). \"error_feedback\" (default: the optimizer's error_feedback, true for "
    "zero_one_adam) keeps this stage's error; unbiased compressors (nbit stochastic, randomk "
    "rescale, identity, fp16/bf16 up to rounding) converge without it, biased ones (sign, "
    "topk, randomk without rescale, nbit nearest) lose the rate without it. binarize is "
    "refused (its input must lie in [-1, 1])";

// Adds both fields (Json Options::worker_compressor, server_compressor).
template <class Options>
void add_stage_compressor_fields(Schema<Options>& s) {
  s.template field<Json>("worker_compressor", &Options::worker_compressor,
                         std::string("worker stage: ") + kStageCompressorDoc);
  s.template field<Json>("server_compressor", &Options::server_compressor,
                         std::string("server stage: ") + kStageCompressorDoc);
}

inline Json default_stage_compressor() {
  return Json::object({{"name", "sign"}});
}

struct OneBitStages {
  OneBitStage worker, server;
  bool is_scaled_sign() const { return worker.is_scaled_sign() && server.is_scaled_sign(); }
};

// Builds both stages; bad input exits 2 through config_fail naming
// `path`.worker_compressor / .server_compressor. {"name": "sign"} with the
// rms scale is the reference (null compressor).
OneBitStages make_onebit_stages(const Json& worker, const Json& server, bool error_feedback,
                                const std::string& path = "optimizer");

// Non-reference stages run in the simulator only: exit 2 when this process
// does not hold every worker (the MPI backend with more than one rank).
void check_stages_local(const OneBitStages& stages, const Json& worker, const Json& server,
                        int workers, WorkerRange local, const std::string& path = "optimizer");

// What each registered compressor means at a stage of the compressed
// allreduce, with and without error feedback (`bitlab list`): name, text.
const std::vector<std::pair<std::string, std::string>>& onebit_stage_notes();

}  // namespace bitlab
