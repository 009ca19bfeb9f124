// The Adam family's shared hyperparameters (β1, β2, ε, weight decay, bias
// correction): one struct, one schema helper, one text per field, used by
// adam, lamb, onebit_adam (and apmsqueeze), onebit_lamb, zero_one_adam and
// loco. Each of those options structs derives from AdamHyperparams and sets
// all five in its constructor, with a one-line reason where it departs from
// PyTorch's torch.optim.Adam (betas (0.9, 0.999), eps 1e-8, weight_decay 0,
// always bias-corrected): today only bias_correction departs, off where
// DeepSpeed's 1-bit family accepts the flag and never applies it.
#pragma once

#include <cstdint>
#include <string>

#include "sim/core/schema.hpp"
#include "sim/kernels/adam_elements.hpp"

namespace bitlab {

struct AdamHyperparams {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
};

// The float coefficients of (1-based) step t at learning rate lr
// (make_adam_coeffs, sim/kernels/adam_elements.hpp).
inline AdamCoeffs adam_coeffs(double lr, const AdamHyperparams& h, int64_t t) {
  return make_adam_coeffs(lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.bias_correction, t);
}

// What one optimizer adds to a field's common text: its own use of the field
// (empty: nothing), after "; ". bias_correction's note says what the flag does
// in the optimizer's phases and why its default is what it is.
struct AdamFieldNotes {  // `{}`: a designated initializer may skip a member under -Wextra
  std::string beta1{};
  std::string beta2{};
  std::string eps{};
  std::string weight_decay{};
  std::string bias_correction{};
};

// Adds beta1, beta2, eps, weight_decay and bias_correction, in that order, to
// the schema of an options struct deriving from AdamHyperparams. The fields
// are named with their value type: a member of the base converts to a member
// of O, but is not deduced as one.
template <class O>
void add_adam_fields(Schema<O>& s, const AdamFieldNotes& notes) {
  const auto text = [](const char* common, const std::string& note) {
    return note.empty() ? std::string(common) : std::string(common) + "; " + note;
  };
  s.template field<double>("beta1", &O::beta1, text("decay rate β1 of the momentum m", notes.beta1),
                           {rules::in_closed_open(0.0, 1.0)});
  s.template field<double>("beta2", &O::beta2,
                           text("decay rate β2 of the second moment v", notes.beta2),
                           {rules::in_closed_open(0.0, 1.0)});
  s.template field<double>("eps", &O::eps, text("ε added to sqrt(v) in the denominator", notes.eps),
                           {rules::greater(0.0)});
  s.template field<double>(
      "weight_decay", &O::weight_decay,
      text("decoupled weight decay wd (AdamW): update = m ⊘ (sqrt(v)+ε) + wd·x",
           notes.weight_decay),
      {rules::at_least(0.0)});
  s.template field<bool>(
      "bias_correction", &O::bias_correction,
      text("divide m, v by 1−β1^t, 1−β2^t (PyTorch's Adam always does)", notes.bias_correction));
}

}  // namespace bitlab
