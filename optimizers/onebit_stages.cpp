#include "optimizers/onebit_stages.hpp"

#include <memory>

namespace bitlab {

namespace {

OneBitStage make_stage(const Json& options, bool error_feedback, const std::string& path) {
  Json compressor = options;
  OneBitStage stage;
  stage.error_feedback = error_feedback;
  if (compressor.is_object() && compressor.contains("error_feedback")) {
    stage.error_feedback =
        JsonCodec<bool>::read(compressor.at("error_feedback"), join_path(path, "error_feedback"));
    compressor.erase("error_feedback");
  }
  std::shared_ptr<const Compressor> c = make_compressor(compressor, path);
  if (c->name() == "binarize") {
    config_fail(join_path(path, "name"), Json("binarize"),
                "binarize draws ±1 from values in [-1, 1] (BinSGDM's m ⊘ (b+ε)); a stage of the "
                "compressed allreduce carries an unbounded momentum or gradient, which it would "
                "clip: use sign, nbit, topk, randomk, identity, fp16 or bf16");
  }
  const bool reference_sign =
      c->name() == "sign" && compressor.value("scale", std::string("rms")) == "rms";
  if (!reference_sign) stage.compressor = std::move(c);
  return stage;
}

}  // namespace

OneBitStages make_onebit_stages(const Json& worker, const Json& server, bool error_feedback,
                                const std::string& path) {
  return {make_stage(worker, error_feedback, join_path(path, "worker_compressor")),
          make_stage(server, error_feedback, join_path(path, "server_compressor"))};
}

void check_stages_local(const OneBitStages& stages, const Json& worker, const Json& server,
                        int workers, WorkerRange local, const std::string& path) {
  if (stages.is_scaled_sign() || (local.begin == 0 && local.end == workers)) return;
  const bool w = !stages.worker.is_scaled_sign();
  config_fail(join_path(path, w ? "worker_compressor" : "server_compressor"), w ? worker : server,
              "compressors other than the reference sign at both stages run in the simulator "
              "only; the MPI backend (more than one rank) carries the reference images");
}

const std::vector<std::pair<std::string, std::string>>& onebit_stage_notes() {
  static const std::vector<std::pair<std::string, std::string>> kNotes = {
      {"sign",
       "biased. Both stages sign (rms) with error feedback: the paper's 1-bit Adam; "
       "without it the compression error accumulates (the ablation). Next to another "
       "compressor: one scale per chunk (4 bytes each)"},
      {"nbit",
       "biased with rounding nearest (needs error feedback for the rate); rounding "
       "stochastic is unbiased inside the group's range and converges without it, "
       "with more variance"},
      {"topk",
       "biased (drops the small coordinates): without error feedback the dropped mass "
       "never arrives and the rate is lost; the image carries k values and k indices"},
      {"randomk",
       "unbiased only with rescale (then error feedback is optional); without "
       "rescale it shrinks the chunk by k/n, a biased compressor that needs error "
       "feedback. shared_seed: every worker draws the same indices, none are sent"},
      {"identity",
       "exact (fp32 on the wire): error feedback keeps zeros; the uncompressed "
       "baseline of the two-stage exchange"},
      {"fp16",
       "round to nearest even: nearly exact; error feedback carries the rounding "
       "error forward"},
      {"bf16",
       "round to nearest even (8-bit mantissa): error feedback carries the rounding "
       "error forward"},
      {"binarize",
       "refused at both stages: it needs inputs in [-1, 1], a momentum is "
       "unbounded (exit 2)"},
  };
  return kNotes;
}

}  // namespace bitlab
