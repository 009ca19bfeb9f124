// Error-feedback policies (docs/algorithms.md §1, §6); see error_feedback.hpp.
#include "sim/compress/error_feedback.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

Schema<ErrorFeedbackOptions> ErrorFeedbackOptions::schema() {
  Schema<ErrorFeedbackOptions> s;
  s.field("kind", &ErrorFeedbackOptions::kind,
          "\"none\"; \"classic\" e = h − C(h) (EF-SGD, Karimireddy et al. 2019); \"ema\" "
          "e = β·e + (1−β)·(h − C(h)) (LoCo, Xie et al. 2024)",
          {rules::one_of({"none", "classic", "ema"})});
  s.field("beta", &ErrorFeedbackOptions::beta,
          "ema only: weight β of the old error (LoCo's err_beta; 0 = classic)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("reset_every", &ErrorFeedbackOptions::reset_every,
          "zero every error after each reset_every steps (LoCo: 1024, counted per tensor in "
          "the reference, per step here); 0 = never",
          {rules::at_least<int64_t>(0)});
  s.field("storage_bits", &ErrorFeedbackOptions::storage_bits,
          "32 = exact fp32 error; 8 = the error is stored 8-bit quantized per group, as LoCo does",
          {Rule<int64_t>{[](const int64_t& v) { return v == 8 || v == 32; }, "must be 8 or 32"}});
  s.field("storage_group", &ErrorFeedbackOptions::storage_group,
          "group size (elements per scale) of the 8-bit error storage",
          {rules::at_least<int64_t>(1)});
  return s;
}

namespace {
ErrorFeedback::Kind parse_kind(const std::string& kind) {
  if (kind == "none") return ErrorFeedback::Kind::kNone;
  if (kind == "classic") return ErrorFeedback::Kind::kClassic;
  if (kind == "ema") return ErrorFeedback::Kind::kEma;
  throw std::invalid_argument("error feedback kind must be none, classic or ema, not " + kind);
}
}  // namespace

ErrorFeedback::ErrorFeedback(const ErrorFeedbackOptions& opts, int workers, size_t len,
                             WorkerRange local)
    : opts_(opts),
      kind_(parse_kind(opts.kind)),
      workers_(workers),
      len_(len),
      local_(local.size() > 0 ? local : WorkerRange{0, workers}),
      unused_rng_(0, Purpose::kCompress) {
  if (workers < 1) throw std::invalid_argument("ErrorFeedback: workers must be >= 1");
  if (local_.begin < 0 || local_.end > workers) {
    throw std::invalid_argument("ErrorFeedback: resident workers [" + std::to_string(local_.begin) +
                                ", " + std::to_string(local_.end) + ") outside [0, " +
                                std::to_string(workers) + ")");
  }
  if (opts.storage_bits != 8 && opts.storage_bits != 32) {
    throw std::invalid_argument("ErrorFeedback: storage_bits must be 8 or 32");
  }
  if (opts.storage_group < 1) throw std::invalid_argument("ErrorFeedback: storage_group < 1");
  storage_spec_.bits = 8;
  storage_spec_.group_size = static_cast<size_t>(opts.storage_group);
  storage_spec_.stochastic = false;
  storage_spec_.fp16_scale = false;
  if (kind_ != Kind::kNone) e_.assign(static_cast<size_t>(local_.size()) * len, 0.0f);
}

void ErrorFeedback::compensate(int worker, std::span<const float> x, std::span<float> h) const {
  const size_t n = len_;
  if (kind_ == Kind::kNone) {
    if (h.data() != x.data()) std::copy(x.begin(), x.begin() + n, h.begin());
    return;
  }
  const float* e = e_.data() + offset(worker);
  for (size_t k = 0; k < n; ++k) h[k] = x[k] + e[k];
}

void ErrorFeedback::update(int worker, std::span<const float> h, std::span<const float> ch) {
  if (kind_ == Kind::kNone) return;
  const size_t n = len_;
  float* e = e_.data() + offset(worker);
  if (kind_ == Kind::kClassic) {
    for (size_t k = 0; k < n; ++k) e[k] = h[k] - ch[k];
  } else {
    // The CPU twin of the CUDA kernel (sim/kernels/cpu_kernels.hpp).
    cpu::ema_error_update(e, h.data(), ch.data(), n, static_cast<float>(opts_.beta));
  }
  if (opts_.storage_bits == 8) {
    const std::span<float> es(e, n);
    quantize_dequantize(es, es, storage_spec_, unused_rng_, 0);
  }
}

void ErrorFeedback::begin_step(int64_t step) {
  if (kind_ == Kind::kNone || opts_.reset_every <= 0) return;
  if (step > 1 && (step - 1) % opts_.reset_every == 0) reset();
}

void ErrorFeedback::reset() {
  std::fill(e_.begin(), e_.end(), 0.0f);
}

std::span<const float> ErrorFeedback::error(int worker) const {
  if (kind_ == Kind::kNone) return {};
  return {e_.data() + offset(worker), len_};
}

}  // namespace bitlab
