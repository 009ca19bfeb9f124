// NonFiniteGradient: what Simulation::take_gradient throws for a handed-in
// gradient with an element that is not finite (nan, inf). Bad input like any
// other (a FieldError: exit 2, bitlab.ConfigError), with what it is about as
// data, which the Python module hands to bitlab.GradientError's worker,
// field (the parameter) and element.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "sim/core/field_error.hpp"

namespace bitlab {

class NonFiniteGradient : public FieldError {
 public:
  NonFiniteGradient(const std::string& message, int worker, std::string parameter,
                    int64_t element, std::string value, std::string rule)
      : FieldError(message, parameter, std::move(value), std::move(rule)),
        worker_(worker),
        parameter_(std::move(parameter)),
        element_(element) {}
  int worker() const { return worker_; }
  const std::string& parameter() const { return parameter_; }  // the tensor's name
  int64_t element() const { return element_; }                 // within the tensor

 private:
  int worker_;
  std::string parameter_;
  int64_t element_;
};

}  // namespace bitlab
