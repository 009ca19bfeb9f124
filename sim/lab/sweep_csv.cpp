// sweep.csv and the shards' csvs (sim/lab/sweep_csv.hpp): writing them, and
// reading the shards' back for --merge.
#include "sim/lab/sweep_csv.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "sim/core/files.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// One csv line split into cells (cells quoted as csv_cell writes them).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t k = 0; k < line.size(); ++k) {
    const char c = line[k];
    if (quoted) {
      if (c == '"' && k + 1 < line.size() && line[k + 1] == '"') {
        cells.back() += '"';
        ++k;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

// The columns that depend on what the runs reported.
struct SummaryColumns {
  std::vector<std::string> evals;  // final eval columns: union, in first-seen order
  bool timed = false;              // some run has a network model
};

SummaryColumns summary_columns(const std::vector<SweepOutcome>& outcomes) {
  SummaryColumns cols;
  for (const auto& out : outcomes) {
    if (!out.done || !out.summary.is_object()) continue;
    if (out.summary.contains("final") && out.summary["final"].is_object()) {
      for (const auto& [k, v] : out.summary["final"].items()) {
        if (k == "train_loss" || k == "grad_norm" || k == "eval_step") continue;
        if (std::find(cols.evals.begin(), cols.evals.end(), k) == cols.evals.end()) {
          cols.evals.push_back(k);
        }
      }
    }
    if (out.summary.contains("time")) cols.timed = true;
  }
  return cols;
}

void write_header(std::ostream& csv, const SweepSpec& spec, const SummaryColumns& cols) {
  csv << "run";
  // A swept path named as one of the columns every sweep has gets a suffix,
  // so that no two columns share a name (pandas would rename one silently).
  for (const auto& p : spec.swept) {
    if (p == "seed") continue;
    const bool clash = p == "optimizer" || p == "workers" || p == "problem";
    csv << ',' << csv_cell(clash ? p + " (swept)" : p);
  }
  // Every run's optimizer, workers and problem, swept or not, so that sweeps
  // combine in pandas without re-reading each config.json.
  csv << ",optimizer,workers,problem";
  csv << ",seed,status,steps_completed,train_loss";
  for (const auto& e : cols.evals) csv << ',' << csv_cell(e);
  csv << ",bytes_sent_per_worker,messages_per_worker";
  if (cols.timed) csv << ",sim_time_s";
  csv << ",wall_s,dir,warnings\n";
}

void write_row(std::ostream& csv, const SweepSpec& spec, const SweepRun& r, const SweepOutcome& out,
               const SummaryColumns& cols) {
  csv << r.index;
  for (const auto& p : spec.swept) {
    if (p == "seed") continue;
    for (size_t i = 0; i < r.assignments.size(); ++i) {
      if (r.assignments[i].first != p) continue;
      csv << ','
          << csv_cell(i < r.value_texts.size() ? r.value_texts[i]
                                               : sweep_value_text(r.assignments[i].second));
    }
  }
  auto config_cell = [&](const char* section, const char* key) -> std::string {
    if (!r.config.contains(section) || !r.config[section].is_object()) return "";
    const Json& sec = r.config[section];
    return sec.contains(key) ? csv_cell(summary_cell(sec[key])) : "";
  };
  csv << ',' << config_cell("optimizer", "name") << ',' << config_cell("cluster", "workers") << ','
      << config_cell("problem", "name");
  csv << ',' << r.config.value("seed", Json(0)).dump() << ',' << out.status;
  const Json& s = out.summary.is_object() ? out.summary : Json::object();
  auto get = [&](const char* section, const std::string& key) -> std::string {
    if (!s.contains(section) || !s[section].is_object() || !s[section].contains(key)) return "";
    return csv_cell(summary_cell(s[section][key]));
  };
  csv << ',' << (s.contains("steps_completed") ? summary_cell(s["steps_completed"]) : "");
  csv << ',' << get("final", "train_loss");
  for (const auto& e : cols.evals) csv << ',' << get("final", e);
  csv << ',' << get("totals", "bytes_sent_per_worker") << ','
      << get("totals", "messages_per_worker");
  if (cols.timed) csv << ',' << get("time", "sim_time_s");
  csv << ',' << (s.contains("wall_s") ? summary_cell(s["wall_s"]) : "") << ','
      << csv_cell(r.dir_name) << ',' << csv_cell(joined_warnings(run_warnings(s))) << '\n';
}

// The shard count k the folder's sweep.shard-<i>-of-<k>.csv files name.
int shard_count(const fs::path& dir) {
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    int i = 0, k = 0;
    if (std::sscanf(name.c_str(), "sweep.shard-%d-of-%d.csv", &i, &k) == 2 &&
        name == shard_csv_name(i, k)) {
      if (shards != 0 && k != shards) {
        throw ConfigError(dir.string() + ": shard csvs of different shard counts (" +
                          std::to_string(shards) + " and " + std::to_string(k) +
                          "); remove the stale ones");
      }
      shards = k;
    }
  }
  if (shards == 0) {
    throw ConfigError(dir.string() +
                      ": no shard csv (sweep.shard-<i>-of-<k>.csv) to merge; run "
                      "`bitlab sweep FILE --shard i/k` first");
  }
  return shards;
}

// Marks the runs shard s of k lists as done, with their status and summary.
void read_shard_csv(const SweepSpec& spec, const fs::path& dir, int s, int shards,
                    std::vector<SweepOutcome>& outcomes) {
  const fs::path p = dir / shard_csv_name(s, shards);
  std::ifstream in(p);
  if (!in) {
    throw ConfigError("--merge: " + p.string() + " is missing: shard " + std::to_string(s) + "/" +
                      std::to_string(shards) + " has not run");
  }
  std::string line;
  std::getline(in, line);
  const auto header = split_csv_line(line);
  const auto status_col = std::find(header.begin(), header.end(), "status") - header.begin();
  while (std::getline(in, line)) {
    const auto cells = split_csv_line(line);
    const int run = std::atoi(cells[0].c_str());
    if (run < 1 || run > static_cast<int>(spec.runs.size()) ||
        static_cast<size_t>(status_col) >= cells.size()) {
      throw ConfigError("--merge: " + p.string() + ": malformed row: " + line);
    }
    SweepOutcome& out = outcomes[run - 1];
    out.done = true;
    out.status = cells[status_col];
    out.summary = read_run_summary(dir / spec.runs[run - 1].dir_name);
  }
}

// Every run must have a row in its shard's csv.
void check_all_merged(const SweepSpec& spec, const std::vector<SweepOutcome>& outcomes,
                      int shards) {
  std::string missing;
  int missing_count = 0;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (outcomes[i].done) continue;
    if (++missing_count <= 5) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(spec.runs[i].index) + " (shard " +
                 std::to_string(i % shards) + ")";
    }
  }
  if (missing_count > 0) {
    throw ConfigError("--merge: " + std::to_string(missing_count) +
                      " run(s) have no row in their shard's csv (unfinished?): " + missing +
                      (missing_count > 5 ? ", ..." : ""));
  }
}

}  // namespace

Json read_run_summary(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::exists(run_dir / "summary.json", ec)) return nullptr;
  try {
    std::ifstream in(run_dir / "summary.json");
    return Json::parse(in);
  } catch (const std::exception&) {
    return nullptr;
  }
}

std::string summary_cell(const Json& j) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::vector<std::string> run_warnings(const Json& summary) {
  std::vector<std::string> out;
  if (!summary.is_object() || !summary.contains("warnings") || !summary["warnings"].is_array()) {
    return out;
  }
  for (const auto& w : summary["warnings"]) {
    if (w.is_string()) out.push_back(w.get<std::string>());
  }
  return out;
}

std::string joined_warnings(const std::vector<std::string>& warnings) {
  std::string text;
  for (const auto& w : warnings) text += (text.empty() ? "" : " | ") + w;
  return text;
}

namespace {

// A warning split at its numbers: the words between them (words.size() ==
// numbers.size() + 1). A number starts at a digit that does not continue a
// word ("fp32", "run-001" stay words) and takes a fraction and an exponent;
// notebooks/report.py's NUMBER_RE reads them alike.
struct WarningParts {
  std::vector<std::string> words;
  std::vector<std::string> numbers;
};

WarningParts split_numbers(const std::string& text) {
  WarningParts p;
  p.words.emplace_back();
  const auto digit = [&text](size_t i) {
    return i < text.size() && text[i] >= '0' && text[i] <= '9';
  };
  const auto wordy = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  };
  size_t i = 0;
  while (i < text.size()) {
    // "-5" stays a word too: a range of signed numbers would read wrongly.
    const bool starts = digit(i) && (i == 0 || !wordy(text[i - 1]));
    if (!starts) {
      p.words.back() += text[i++];
      continue;
    }
    size_t j = i;
    while (digit(j)) ++j;
    if (j + 1 < text.size() && text[j] == '.' && digit(j + 1)) {
      for (++j; digit(j);) ++j;
    }
    if (j + 1 < text.size() && (text[j] == 'e' || text[j] == 'E')) {
      size_t k = j + 1;
      if (k < text.size() && (text[k] == '-' || text[k] == '+')) ++k;
      if (digit(k)) {
        for (j = k; digit(j);) ++j;
      }
    }
    p.numbers.push_back(text.substr(i, j - i));
    p.words.emplace_back();
    i = j;
  }
  return p;
}

std::string kind_key(const WarningParts& p) {
  std::string key;
  for (const auto& w : p.words) key += w + '\x01';
  return key;
}

// The group's text: each number as in every text, or its range over them.
std::string ranged_text(const std::vector<WarningParts>& texts) {
  const WarningParts& first = texts.front();
  std::string out = first.words[0];
  for (size_t k = 0; k < first.numbers.size(); ++k) {
    std::string low = first.numbers[k], high = low;
    for (const auto& t : texts) {
      if (std::strtod(t.numbers[k].c_str(), nullptr) < std::strtod(low.c_str(), nullptr)) {
        low = t.numbers[k];
      }
      if (std::strtod(t.numbers[k].c_str(), nullptr) > std::strtod(high.c_str(), nullptr)) {
        high = t.numbers[k];
      }
    }
    out += low == high ? low : low + "\u2013" + high;
    out += first.words[k + 1];
  }
  return out;
}

}  // namespace

std::vector<WarningGroup> group_warnings(
    const std::vector<std::pair<int, std::vector<std::string>>>& per_run) {
  std::vector<std::string> order;  // kinds, first seen first
  std::map<std::string, std::vector<WarningParts>> texts;
  std::map<std::string, std::vector<int>> runs;
  for (const auto& [run, warnings] : per_run) {
    for (const auto& w : warnings) {
      WarningParts parts = split_numbers(w);
      const std::string key = kind_key(parts);
      if (!texts.count(key)) order.push_back(key);
      texts[key].push_back(std::move(parts));
      auto& r = runs[key];
      if (r.empty() || r.back() != run) r.push_back(run);
    }
  }
  std::stable_sort(order.begin(), order.end(), [&runs](const std::string& a, const std::string& b) {
    return runs[a].size() > runs[b].size();
  });
  std::vector<WarningGroup> out;
  for (const auto& key : order) out.push_back({ranged_text(texts[key]), runs[key]});
  return out;
}

std::string shard_csv_name(int shard, int shards) {
  return "sweep.shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) + ".csv";
}

std::string sweep_csv_name(const SweepOptions& options) {
  return options.shards > 0 ? shard_csv_name(options.shard, options.shards) : "sweep.csv";
}

void write_sweep_csv(const SweepSpec& spec, const std::vector<SweepOutcome>& outcomes,
                     const std::string& path) {
  const SummaryColumns cols = summary_columns(outcomes);
  std::ostringstream csv;
  write_header(csv, spec, cols);
  for (size_t i = 0; i < outcomes.size(); ++i) {
    if (outcomes[i].done) write_row(csv, spec, spec.runs[i], outcomes[i], cols);
  }
  write_text_atomic(path, csv.str());
}

int merge_shard_csvs(const SweepSpec& spec, const fs::path& dir, const std::string& csv_name) {
  // Every shard of the count the folder's shard csvs name must be there.
  const int shards = shard_count(dir);
  std::vector<SweepOutcome> outcomes(spec.runs.size());
  for (int s = 0; s < shards; ++s) read_shard_csv(spec, dir, s, shards, outcomes);
  check_all_merged(spec, outcomes, shards);
  write_sweep_csv(spec, outcomes, (dir / csv_name).string());
  std::printf("%s\n", dir.string().c_str());
  std::fflush(stdout);
  for (const auto& out : outcomes) {
    if (out.status != "completed") return 3;
  }
  return 0;
}

}  // namespace bitlab
