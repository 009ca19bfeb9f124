// FieldError: a ConfigError about one value, with its parts as data. Every
// "<field> = <value>: <rule>" error (config_fail, the schemas, the DeepSpeed
// reader) is one; the Python module hands the parts to bitlab.ConfigError's
// field, value and rule without reading them back out of the message.
#pragma once

#include <string>

#include "sim/core/schema.hpp"

namespace bitlab {

class FieldError : public ConfigError {
 public:
  FieldError(const std::string& message, std::string path, std::string value, std::string rule)
      : ConfigError(message, std::move(path)), value_(std::move(value)), rule_(std::move(rule)) {}
  // The value as the message shows it (show_value), and the rule it broke.
  const std::string& value() const { return value_; }
  const std::string& rule() const { return rule_; }

 private:
  std::string value_, rule_;
};

// Throws `error` again with `context` before its message ("--set x=1: ",
// "run.json: "), its path kept, and its value and rule when it is a FieldError.
[[noreturn]] void rethrow_with_context(const ConfigError& error, const std::string& context);

}  // namespace bitlab
