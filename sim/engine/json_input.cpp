// bitlab's one JSON reader (json_input.hpp): strict parsing with the place of
// an error, and files read up to a bound.
#include "sim/engine/json_input.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace bitlab {

namespace {

// Where byte `at` (0-based) of `text` is, as "line:column" (1-based).
std::string line_and_column(const std::string& text, size_t at) {
  at = std::min(at, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// nlohmann prefixes "[json.exception.parse_error.101] parse error at line 3, column 5: ".
std::string without_json_prefix(const std::string& what) {
  const auto colon = what.find(": ");
  const auto bracket = what.find("] ");
  if (colon != std::string::npos) return what.substr(colon + 2);
  return bracket != std::string::npos ? what.substr(bracket + 2) : what;
}

// Where the parser is: the key or index of each open object or array, so that
// an error the parser reports without a place (a number out of range: 1e400)
// names the field.
class JsonPlace {
 public:
  void open(bool array) { frames_.push_back({array, "", 0}); }
  void close() {
    if (!frames_.empty()) frames_.pop_back();
    next_element();
  }
  void key(const std::string& k) {
    if (!frames_.empty()) frames_.back().key = k;
  }
  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }
  // "optimizer.lr", "grid.optimizer.lr[2]"; "" at the top.
  std::string path() const {
    std::string out;
    for (const auto& f : frames_) {
      if (f.array) {
        out += "[" + std::to_string(f.index) + "]";
      } else if (!f.key.empty()) {
        out += (out.empty() ? "" : ".") + f.key;
      }
    }
    return out.size() > 200 ? out.substr(0, 197) + "..." : out;
  }

 private:
  struct Frame {
    bool array;
    std::string key;  // an object's key being read
    size_t index;     // an array's element being read
  };
  std::vector<Frame> frames_;
};

// Refuses, while parsing, what the JSON grammar allows but bitlab cannot use
// safely: nesting deeper than kMaxJsonDepth (deeper documents would only
// overflow the stack of the code that walks them later) and a key given twice
// in one object (nlohmann keeps the last silently; the user meant one of them).
// Keeps `place` up to date (the parser copies this object; `place` is shared).
class StrictParse {
 public:
  StrictParse(std::string source, std::shared_ptr<JsonPlace> place)
      : source_(std::move(source)), place_(std::move(place)) {}

  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth) {
      throw ConfigError(source_ + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels; bitlab's files are at most a few levels deep");
    }
    if (event == E::object_start || event == E::array_start) place_->open(event == E::array_start);
    if (event == E::object_end || event == E::array_end) place_->close();
    if (event == E::value) place_->next_element();
    if (event == E::object_start) keys_.emplace_back();
    if (event == E::object_end && !keys_.empty()) keys_.pop_back();
    if (event == E::key && !keys_.empty()) {
      const std::string key = parsed.get<std::string>();
      place_->key(key);
      if (!keys_.back().insert(key).second) {
        throw ConfigError(source_ + ": key \"" + key +
                          "\" appears twice in one object; give it once");
      }
    }
    return true;
  }

 private:
  std::string source_;
  std::shared_ptr<JsonPlace> place_;
  std::vector<std::set<std::string>> keys_;  // the keys of each open object
};

}  // namespace

Json parse_json_text(const std::string& text, const std::string& source) {
  const auto place = std::make_shared<JsonPlace>();
  try {
    return Json::parse(text, StrictParse(source, place));
  } catch (const Json::parse_error& e) {
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    throw ConfigError(source + ":" + line_and_column(text, at) +
                      ": JSON syntax error: " + without_json_prefix(e.what()));
  } catch (const Json::out_of_range& e) {
    // e.g. 1e400: "number overflow parsing '1e400'", which says no place: the
    // field is where the parser stood.
    const std::string field = place->path();
    throw ConfigError(source + ": " + (field.empty() ? "" : field + ": ") +
                          without_json_prefix(e.what()) +
                          ": numbers must fit a 64-bit float or integer",
                      field);
  } catch (const Json::exception& e) {
    throw ConfigError(source + ": " + without_json_prefix(e.what()));
  }
}

bool is_valid_utf8(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

Json load_json_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path + ": is a directory, expected an experiment .json file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot be read");
  // Read in pieces up to a bound: a path to /dev/zero or to a huge file would
  // otherwise be read until memory runs out. Pipes (bash's <(...)) still work.
  std::string text;
  char piece[1 << 16];
  while (in.read(piece, sizeof piece) || in.gcount() > 0) {
    text.append(piece, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxJsonFileBytes) {
      throw ConfigError(path + ": longer than " + std::to_string(kMaxJsonFileBytes >> 20) +
                        " MiB; an experiment, sweep or cost file is a few kB (is it the right "
                        "file?)");
    }
  }
  if (in.bad()) throw ConfigError(path + ": cannot be read");
  return parse_json_text(text, path);
}

}  // namespace bitlab
