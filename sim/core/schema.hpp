// Options schemas: one place that knows, for an options struct, each field's
// JSON name, type, default, rule and meaning. It reads a JSON object into the
// struct (defaults filled, every rule checked, unknown keys rejected with a
// "did you mean"), writes the resolved struct back to JSON, and describes the
// fields for `bitlab list`. (Ceres-style: options validated in one place, with
// messages that name the field and the violated rule.)
//
// Error messages have one shape: `<json path> = <value>: <rule>`, e.g.
//   optimizer.freeze_step = -3: must be >= 0
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace bitlab {

using Json = nlohmann::ordered_json;

// A bad experiment file, flag or data file. The CLI prints what() and exits 2.
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::string& message, std::string path = "")
      : std::runtime_error(message), path_(std::move(path)) {}
  // JSON path of the offending value ("" when the error is not about one).
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string join_path(std::string_view parent, std::string_view key);
// Compact one-line rendering of a JSON value for messages (long values cut).
std::string show_value(const Json& value);
[[noreturn]] void config_fail(std::string_view path, const Json& value, std::string_view rule);
// The closest candidate by edit distance, or "" if none is close enough.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);
// `must be one of "a", "b"` plus `; did you mean "a"?` when one is close.
std::string one_of_message(std::string_view got, const std::vector<std::string>& choices);

// ---- JSON <-> C++ value codecs ---------------------------------------------

template <class V, class Enable = void>
struct JsonCodec;

template <>
struct JsonCodec<bool> {
  static const char* type_name() { return "bool"; }
  static bool read(const Json& j, std::string_view path) {
    if (!j.is_boolean()) config_fail(path, j, "must be true or false");
    return j.get<bool>();
  }
  static Json write(bool v) { return v; }
};

template <class V>
struct JsonCodec<V, std::enable_if_t<std::is_integral_v<V> && !std::is_same_v<V, bool>>> {
  static const char* type_name() { return std::is_unsigned_v<V> ? "unsigned int" : "int"; }
  static V read(const Json& j, std::string_view path) {
    if (j.is_number_integer()) {
      if constexpr (std::is_unsigned_v<V>) {
        if (j.is_number_unsigned()) {
          const auto u = j.get<uint64_t>();
          if (u > static_cast<uint64_t>(std::numeric_limits<V>::max()))
            config_fail(path, j, "is too large");
          return static_cast<V>(u);
        }
        const auto s = j.get<int64_t>();
        if (s < 0) config_fail(path, j, "must be >= 0");
        if (static_cast<uint64_t>(s) > static_cast<uint64_t>(std::numeric_limits<V>::max()))
          config_fail(path, j, "is too large");
        return static_cast<V>(s);
      } else {
        if (j.is_number_unsigned() &&
            j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<V>::max()))
          config_fail(path, j, "is too large");
        const auto s = j.get<int64_t>();
        if (s < static_cast<int64_t>(std::numeric_limits<V>::min()) ||
            s > static_cast<int64_t>(std::numeric_limits<V>::max()))
          config_fail(path, j, "is out of the integer range");
        return static_cast<V>(s);
      }
    }
    if (j.is_number_float()) {
      // 1e3 is written as a float by JSON; accept it when it is a whole number.
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
        return read(Json(static_cast<int64_t>(d)), path);
      }
      config_fail(path, j, "must be a whole number");
    }
    config_fail(path, j, "must be an integer");
  }
  static Json write(V v) { return v; }
};

template <class V>
struct JsonCodec<V, std::enable_if_t<std::is_floating_point_v<V>>> {
  static const char* type_name() { return "number"; }
  static V read(const Json& j, std::string_view path) {
    if (!j.is_number()) config_fail(path, j, "must be a number");
    const double d = j.get<double>();
    if (!std::isfinite(d)) config_fail(path, j, "must be finite");
    return static_cast<V>(d);
  }
  static Json write(V v) { return static_cast<double>(v); }
};

template <>
struct JsonCodec<std::string> {
  static const char* type_name() { return "string"; }
  static std::string read(const Json& j, std::string_view path) {
    if (!j.is_string()) config_fail(path, j, "must be a string");
    return j.get<std::string>();
  }
  static Json write(const std::string& v) { return v; }
};

template <>
struct JsonCodec<std::vector<double>> {
  static const char* type_name() { return "list of numbers"; }
  static std::vector<double> read(const Json& j, std::string_view path) {
    if (!j.is_array()) config_fail(path, j, "must be a list of numbers");
    std::vector<double> out;
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(JsonCodec<double>::read(j[i], join_path(path, std::to_string(i))));
    }
    return out;
  }
  static Json write(const std::vector<double>& v) { return Json(v); }
};

template <>
struct JsonCodec<std::vector<int64_t>> {
  static const char* type_name() { return "list of integers"; }
  static std::vector<int64_t> read(const Json& j, std::string_view path) {
    if (!j.is_array()) config_fail(path, j, "must be a list of integers");
    std::vector<int64_t> out;
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(JsonCodec<int64_t>::read(j[i], join_path(path, std::to_string(i))));
    }
    return out;
  }
  static Json write(const std::vector<int64_t>& v) { return Json(v); }
};

template <>
struct JsonCodec<std::vector<std::string>> {
  static const char* type_name() { return "list of strings"; }
  static std::vector<std::string> read(const Json& j, std::string_view path) {
    if (!j.is_array()) config_fail(path, j, "must be a list of strings");
    std::vector<std::string> out;
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(JsonCodec<std::string>::read(j[i], join_path(path, std::to_string(i))));
    }
    return out;
  }
  static Json write(const std::vector<std::string>& v) { return Json(v); }
};

// ---- rules -----------------------------------------------------------------

template <class V>
struct Rule {
  std::function<bool(const V&)> ok;
  std::string text;  // completes "<path> = <value>: ..." e.g. "must be > 0"
  // Optional: a message tailored to the bad value (e.g. with "did you mean").
  std::function<std::string(const V&)> explain = nullptr;
};

namespace rules {
std::string num(double v);  // shortest readable rendering of a bound

template <class V>
Rule<V> greater(V lo) {
  return {[lo](const V& v) { return v > lo; }, "must be > " + num(static_cast<double>(lo))};
}
template <class V>
Rule<V> at_least(V lo) {
  return {[lo](const V& v) { return v >= lo; }, "must be >= " + num(static_cast<double>(lo))};
}
template <class V>
Rule<V> at_most(V hi) {
  return {[hi](const V& v) { return v <= hi; }, "must be <= " + num(static_cast<double>(hi))};
}
// lo <= v < hi
template <class V>
Rule<V> in_closed_open(V lo, V hi) {
  return {
      [lo, hi](const V& v) { return v >= lo && v < hi; },
      "must be in [" + num(static_cast<double>(lo)) + ", " + num(static_cast<double>(hi)) + ")"};
}
// lo <= v <= hi
template <class V>
Rule<V> in_closed(V lo, V hi) {
  return {
      [lo, hi](const V& v) { return v >= lo && v <= hi; },
      "must be in [" + num(static_cast<double>(lo)) + ", " + num(static_cast<double>(hi)) + "]"};
}
Rule<std::string> one_of(std::vector<std::string> choices);
}  // namespace rules

// ---- schema ----------------------------------------------------------------

struct FieldInfo {
  std::string name;
  std::string type;
  Json default_value;
  std::string rule;  // all rules, joined with "; "
  std::string doc;
};

template <class T>
class Schema {
 public:
  // `name` is the JSON key; `doc` says what it means (and cites the paper).
  template <class V>
  Schema& field(std::string name, V T::*member, std::string doc, std::vector<Rule<V>> rules = {}) {
    Field f;
    f.info.name = name;
    f.info.type = JsonCodec<V>::type_name();
    f.info.doc = std::move(doc);
    for (const auto& r : rules) {
      if (!f.info.rule.empty()) f.info.rule += "; ";
      f.info.rule += r.text;
    }
    f.read = [member, rules](T& out, const Json& j, const std::string& path) {
      V v = JsonCodec<V>::read(j, path);
      for (const auto& r : rules) {
        if (!r.ok(v)) config_fail(path, j, r.explain ? r.explain(v) : r.text);
      }
      out.*member = std::move(v);
    };
    f.write = [member](const T& in) { return JsonCodec<V>::write(in.*member); };
    f.info.default_value = f.write(T{});
    fields_.push_back(std::move(f));
    return *this;
  }

  // A rule across fields, run after every field is read. It throws through
  // config_fail with the path of the offending field.
  Schema& check(std::function<void(const T&, const std::string& path)> cross) {
    checks_.push_back(std::move(cross));
    return *this;
  }

  // Keys that may appear in the object but are read by someone else ("name").
  Schema& allow_key(std::string key) {
    extra_keys_.push_back(std::move(key));
    return *this;
  }

  // A key this object refuses with its own reason (an option that belongs to
  // other objects of the same kind), instead of "unknown key".
  Schema& refuse_key(std::string key, std::string rule) {
    refused_keys_.emplace_back(std::move(key), std::move(rule));
    return *this;
  }

  // A field's former name: still read as `new_name` (files and results
  // folders written before the rename hold it), never written. Both names in
  // one object is an error naming the old one.
  Schema& alias(std::string old_name, std::string new_name) {
    aliases_.emplace_back(std::move(old_name), std::move(new_name));
    return *this;
  }

  T read(const Json& obj, const std::string& path) const {
    if (!obj.is_object()) config_fail(path, obj, "must be a JSON object");
    if (!aliases_.empty()) {
      Json renamed = obj;
      for (const auto& [old_name, new_name] : aliases_) {
        if (!obj.contains(old_name)) continue;
        if (obj.contains(new_name)) {
          config_fail(join_path(path, old_name), obj.at(old_name),
                      "the former name of \"" + new_name + "\", given beside it: keep \"" +
                          new_name + "\"");
        }
        renamed[new_name] = obj.at(old_name);
        renamed.erase(old_name);
      }
      return read_fields(renamed, path);
    }
    return read_fields(obj, path);
  }

  Json write(const T& v) const {
    Json out = Json::object();
    for (const auto& f : fields_) out[f.info.name] = f.write(v);
    return out;
  }

  std::vector<FieldInfo> describe() const {
    std::vector<FieldInfo> out;
    for (const auto& f : fields_) out.push_back(f.info);
    return out;
  }

 private:
  T read_fields(const Json& obj, const std::string& path) const {
    std::vector<std::string> known;
    for (const auto& f : fields_) known.push_back(f.info.name);
    for (const auto& k : extra_keys_) known.push_back(k);
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      for (const auto& [key, rule] : refused_keys_) {
        if (key == it.key()) config_fail(join_path(path, key), it.value(), rule);
      }
      bool found = false;
      for (const auto& k : known) found = found || k == it.key();
      if (!found) {
        std::string rule = "unknown key";
        const std::string close = closest_match(it.key(), known);
        if (!close.empty()) rule += "; did you mean \"" + close + "\"?";
        rule += " (known keys: ";
        for (size_t i = 0; i < known.size(); ++i) rule += (i ? ", " : "") + known[i];
        rule += ")";
        config_fail(join_path(path, it.key()), it.value(), rule);
      }
    }
    T out{};
    for (const auto& f : fields_) {
      auto it = obj.find(f.info.name);
      if (it != obj.end()) f.read(out, *it, join_path(path, f.info.name));
    }
    for (const auto& c : checks_) c(out, path);
    return out;
  }

  struct Field {
    FieldInfo info;
    std::function<void(T&, const Json&, const std::string&)> read;
    std::function<Json(const T&)> write;
  };
  std::vector<Field> fields_;
  std::vector<std::function<void(const T&, const std::string&)>> checks_;
  std::vector<std::string> extra_keys_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // (former name, name)
  std::vector<std::pair<std::string, std::string>> refused_keys_;  // (key, rule)
};

}  // namespace bitlab
