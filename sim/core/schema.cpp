#include "sim/core/schema.hpp"

#include "sim/core/field_error.hpp"

#include <algorithm>
#include <cstdio>

namespace bitlab {

std::string join_path(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  std::string out(parent);
  out += '.';
  out += key;
  return out;
}

std::string show_value(const Json& value) {
  std::string s = value.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

void rethrow_with_context(const ConfigError& error, const std::string& context) {
  if (const auto* field = dynamic_cast<const FieldError*>(&error)) {
    throw FieldError(context + error.what(), error.path(), field->value(), field->rule());
  }
  throw ConfigError(context + error.what(), error.path());
}

void config_fail(std::string_view path, const Json& value, std::string_view rule) {
  std::string msg(path.empty() ? std::string_view("(experiment)") : path);
  const std::string shown = value.is_discarded() ? "" : show_value(value);
  if (!value.is_discarded()) msg += " = " + shown;
  msg += ": ";
  msg += rule;
  throw FieldError(msg, std::string(path), shown, std::string(rule));
}

static size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Close enough: at most a third of the word's letters (and at least 2) wrong.
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : std::string();
}

std::string one_of_message(std::string_view got, const std::vector<std::string>& choices) {
  std::string msg = "must be one of ";
  for (size_t i = 0; i < choices.size(); ++i) msg += (i ? ", \"" : "\"") + choices[i] + "\"";
  const std::string close = closest_match(got, choices);
  if (!close.empty()) msg += "; did you mean \"" + close + "\"?";
  return msg;
}

namespace rules {
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

Rule<std::string> one_of(std::vector<std::string> choices) {
  std::string text = "must be one of ";
  for (size_t i = 0; i < choices.size(); ++i) text += (i ? ", \"" : "\"") + choices[i] + "\"";
  return {[choices](const std::string& v) {
            return std::find(choices.begin(), choices.end(), v) != choices.end();
          },
          text, [choices](const std::string& v) { return one_of_message(v, choices); }};
}
}  // namespace rules

}  // namespace bitlab
