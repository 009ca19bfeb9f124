#include "sim/lab/recost.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "problems/problem.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/core/files.hpp"
#include "sim/engine/config.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

constexpr const char* kCommLogColumns[] = {"step",       "op",      "algorithm", "dtype",
                                           "scope",      "ranks",   "groups",    "payload_bytes",
                                           "sent_bytes", "messages"};
constexpr size_t kCommLogWidth = 10;

// Shortest text that reads back to the same double (as run.cpp writes them).
std::string fmt_number(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

void split_csv(std::string_view line, std::vector<std::string_view>& out) {
  out.clear();
  size_t start = 0;
  for (;;) {
    const size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.push_back(line.substr(start));
      return;
    }
    out.push_back(line.substr(start, comma - start));
    start = comma + 1;
  }
}

// A text file read line by line; errors name "<file>: line <n>: ...".
class LineReader {
 public:
  explicit LineReader(fs::path path) : path_(std::move(path)) {
    std::error_code ec;
    if (!fs::exists(path_, ec)) throw ConfigError(path_.string() + ": no such file");
    if (fs::is_directory(path_, ec)) throw ConfigError(path_.string() + ": is a directory");
    in_.open(path_, std::ios::binary);
    if (!in_) throw ConfigError(path_.string() + ": cannot be read");
  }
  // The next line without its end-of-line; false at the end of the file.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) {
      if (in_.bad()) fail("read error");
      return false;
    }
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError(path_.string() + ": line " + std::to_string(line_no_) + ": " + what);
  }
  int64_t line_no() const { return line_no_; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  std::ifstream in_;
  int64_t line_no_ = 0;
};

int64_t parse_int(const LineReader& r, std::string_view text, const char* column) {
  int64_t v = 0;
  const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || res.ec != std::errc() || res.ptr != text.data() + text.size()) {
    r.fail(std::string("column ") + column + ": \"" + std::string(text) + "\" is not an integer");
  }
  return v;
}

double parse_double(const LineReader& r, std::string_view text, const char* column) {
  double v = 0;
  const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || res.ec != std::errc() || res.ptr != text.data() + text.size()) {
    r.fail(std::string("column ") + column + ": \"" + std::string(text) + "\" is not a number");
  }
  return v;
}

// Streams comm_log.csv in step order, one step's records at a time.
class CommLogReader {
 public:
  explicit CommLogReader(const fs::path& path) : reader_(path) {
    std::string header;
    if (!reader_.next(header)) reader_.fail("empty file; expected the header " + expected_header());
    split_csv(header, fields_);
    bool ok = fields_.size() == kCommLogWidth;
    for (size_t k = 0; ok && k < kCommLogWidth; ++k) ok = fields_[k] == kCommLogColumns[k];
    if (!ok) reader_.fail("expected the header " + expected_header());
    advance();
  }

  // Appends the records of `step` to `out`. Steps must be asked in increasing
  // order; a record of an earlier step that was never asked for is an error
  // (its step has no row in metrics.csv).
  void records_for(int64_t step, std::vector<CommRecord>& out) {
    out.clear();
    while (pending_ && pending_->step < step) orphan();
    while (pending_ && pending_->step == step) {
      out.push_back(*pending_);
      advance();
    }
  }
  // Throws if records are left after the last metrics row.
  void finish() {
    if (pending_) orphan();
  }
  int64_t records_read() const { return records_read_; }

 private:
  static std::string expected_header() {
    // Appended, not `"," + std::string(...)`: GCC 12 at -O3 takes that
    // operator+ for an overlapping copy (-Wrestrict, a false positive: GCC
    // bug 105329), as in sim/lab/rate.cpp.
    std::string s;
    for (size_t k = 0; k < kCommLogWidth; ++k) {
      if (k) s += ',';
      s += kCommLogColumns[k];
    }
    return s;
  }
  [[noreturn]] void orphan() const {
    throw ConfigError(reader_.path().string() + ": line " + std::to_string(pending_line_) +
                      ": step " + std::to_string(pending_->step) + " has no row in metrics.csv");
  }
  const char* intern(std::string_view s) { return pool_.emplace(s).first->c_str(); }

  void advance() {
    pending_.reset();
    std::string line;
    while (reader_.next(line)) {
      if (line.empty()) continue;
      split_csv(line, fields_);
      if (fields_.size() != kCommLogWidth) {
        reader_.fail("expected " + std::to_string(kCommLogWidth) + " columns, found " +
                     std::to_string(fields_.size()));
      }
      CommRecord r;
      r.step = parse_int(reader_, fields_[0], "step");
      const std::string_view op = fields_[1];
      if (op != "allreduce" && op != "allgather" && op != "reduce_scatter" && op != "alltoall" &&
          op != "broadcast") {
        reader_.fail("column op: \"" + std::string(op) +
                     "\" is not one of allreduce, allgather, reduce_scatter, alltoall, broadcast");
      }
      r.op = intern(op);
      r.algorithm = intern(fields_[2]);
      if (fields_[3].empty()) reader_.fail("column dtype: empty");
      r.dtype = intern(fields_[3]);
      const std::string_view scope = fields_[4];
      if (scope != "all" && scope != "intra" && scope != "inter") {
        reader_.fail("column scope: \"" + std::string(scope) +
                     "\" is not one of all, intra, inter");
      }
      r.scope = intern(scope);
      const int64_t ranks = parse_int(reader_, fields_[5], "ranks");
      const int64_t groups = parse_int(reader_, fields_[6], "groups");
      if (ranks < 1 || ranks > (int64_t{1} << 30)) reader_.fail("column ranks: must be >= 1");
      if (groups < 1 || groups > (int64_t{1} << 30)) reader_.fail("column groups: must be >= 1");
      r.ranks = static_cast<int>(ranks);
      r.groups = static_cast<int>(groups);
      r.payload_bytes = parse_int(reader_, fields_[7], "payload_bytes");
      if (r.payload_bytes < 0) reader_.fail("column payload_bytes: must be >= 0");
      r.sent_bytes = parse_double(reader_, fields_[8], "sent_bytes");
      // from_chars reads "nan" and "inf" as numbers: a byte count must be neither.
      if (!std::isfinite(r.sent_bytes) || r.sent_bytes < 0) {
        reader_.fail("column sent_bytes: \"" + std::string(fields_[8]) +
                     "\" must be a finite number >= 0");
      }
      r.messages = parse_int(reader_, fields_[9], "messages");
      if (r.messages < 0) reader_.fail("column messages: must be >= 0");
      if (r.step < last_step_) {
        reader_.fail("step " + std::to_string(r.step) + " comes after step " +
                     std::to_string(last_step_) + " (the log must be in step order)");
      }
      last_step_ = r.step;
      pending_ = r;
      pending_line_ = reader_.line_no();
      ++records_read_;
      return;
    }
  }

  LineReader reader_;
  std::vector<std::string_view> fields_;
  std::unordered_set<std::string> pool_;  // node-based: c_str() pointers stay valid
  std::optional<CommRecord> pending_;
  int64_t pending_line_ = 0;
  int64_t last_step_ = std::numeric_limits<int64_t>::min();
  int64_t records_read_ = 0;
};

[[noreturn]] void bad_config(const fs::path& file, const std::string& what) {
  throw ConfigError(file.string() + ": " + what);
}


// Applies the --set overrides to {"network": ..., "compute": ...}; each must
// name network.<field> or compute.<field>.
void apply_sets(Json& sections, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    const std::string path = s.substr(0, s.find('='));
    if (path.rfind("network.", 0) != 0 && path.rfind("compute.", 0) != 0) {
      throw ConfigError("--set " + s +
                        ": recost can only change network.<field> or compute.<field>");
    }
    apply_set(sections, s);
  }
}

template <class T>
T read_section(const Json& sections, const char* name, const std::vector<std::string>& sets) {
  try {
    return T::schema().read(sections.at(name), name);
  } catch (const ConfigError& err) {
    rethrow_blaming_set(err, sets);
  }
}

// Every worker's compute time per step before jitter and stragglers, as
// Simulation computes it: base_compute_s(compute, dim, max(1, batch samples of
// worker i)). The problem's dimension and the batches matter only for a
// derived compute time (step_ms 0, device_tflops > 0); they come from
// summary.json's "dim" and config.json's cluster.batch_size when they can,
// otherwise the problem (and, for a full batch, the shards) are rebuilt from
// the resolved config.
std::vector<double> worker_base_s(const fs::path& dir, const Json& config, const ComputeOptions& c,
                                  int64_t workers) {
  const auto n = static_cast<size_t>(workers);
  if (!(c.step_ms <= 0 && c.device_tflops > 0)) {
    return std::vector<double>(n, base_compute_s(c, 0.0, 1.0));  // independent of both
  }
  const fs::path config_path = dir / "config.json";
  std::optional<double> dim;
  if (c.model_params > 0) dim = 0.0;  // not used
  const fs::path summary_path = dir / "summary.json";
  std::error_code ec;
  if (!dim && fs::exists(summary_path, ec)) {
    const Json summary = load_json_file(summary_path.string());
    if (summary.is_object() && summary.contains("dim") && summary.at("dim").is_number()) {
      dim = summary.at("dim").get<double>();
    }
  }
  std::vector<double> samples;
  const Json& batch = config.at("cluster").at("batch_size");
  if (batch.is_number_integer()) {
    samples.assign(
        n, compute_samples(static_cast<size_t>(std::max<int64_t>(0, batch.get<int64_t>()))));
  } else if (!(batch.is_string() && batch.get<std::string>() == "full")) {
    bad_config(config_path,
               "cluster.batch_size = " + show_value(batch) + ": must be an integer or \"full\"");
  }
  if (!dim || samples.empty()) {
    if (!config.contains("problem") || !config.at("problem").is_object() ||
        !config.at("problem").contains("name")) {
      bad_config(config_path, "problem: missing (needed for the derived compute time)");
    }
    const Json& name = config.at("problem").at("name");
    const auto* entry =
        name.is_string() ? find_entry(problem_registry(), name.get<std::string>()) : nullptr;
    if (!entry) bad_config(config_path, "problem.name = " + show_value(name) + ": unknown problem");
    const auto problem = entry->make(config.at("problem"));
    if (!dim) dim = static_cast<double>(problem->dim());
    if (samples.empty()) {
      const auto opts = ClusterOptions::schema().read(config.at("cluster"), "cluster");
      const auto shards = make_shards(*problem, opts, config.at("seed").get<uint64_t>());
      for (const auto& s : shards) samples.push_back(compute_samples(s.size()));
    }
  }
  std::vector<double> base(n);
  for (size_t i = 0; i < n; ++i) base[i] = base_compute_s(c, *dim, samples[i]);
  return base;
}

// What recost reads of the run's config.json.
struct RunConfig {
  fs::path path;
  Json json;
  int64_t workers = 0;
  uint64_t seed = 0;
  // A top-level section (an empty object when absent).
  Json section(const char* name) const {
    if (!json.contains(name)) return Json(Json::object());
    const Json& s = json.at(name);
    if (!s.is_object()) bad_config(path, std::string(name) + ": must be a JSON object");
    return s;
  }
};

RunConfig read_run_config(const fs::path& dir) {
  RunConfig c;
  c.path = dir / "config.json";
  c.json = load_json_file(c.path.string());
  const Json& config = c.json;
  if (!config.is_object()) bad_config(c.path, "must be a JSON object");
  if (!config.contains("cluster") || !config.at("cluster").is_object()) {
    bad_config(c.path, "cluster: missing (is this a bitlab results folder?)");
  }
  const Json& cluster = config.at("cluster");
  if (!cluster.contains("workers") || !cluster.at("workers").is_number_integer() ||
      cluster.at("workers").get<int64_t>() < 1) {
    bad_config(c.path, "cluster.workers: missing or not a positive integer");
  }
  c.workers = cluster.at("workers").get<int64_t>();
  if (!cluster.contains("batch_size")) bad_config(c.path, "cluster.batch_size: missing");
  // nlohmann stores a non-negative JSON integer as unsigned.
  if (!config.contains("seed") || !config.at("seed").is_number_unsigned()) {
    bad_config(c.path, "seed: missing or not an integer >= 0");
  }
  c.seed = config.at("seed").get<uint64_t>();
  return c;
}

// The new network and compute model (the run's own, or --network, then the
// --set overrides), the label and the run's old preset, into `res`.
void read_new_model(const RecostOptions& o, const RunConfig& run, RecostResult& res) {
  Json sections = Json::object();
  if (!o.network.empty() && !o.network_file.empty()) {
    config_fail("--network-file", Json(o.network_file),
                "give either --network (\"" + o.network + "\") or --network-file, not both");
  }
  sections["network"] = !o.network_file.empty() ? Json{{"file", o.network_file}}
                        : o.network.empty()      ? run.section("network")
                                                 : Json{{"preset", o.network}};
  sections["compute"] = run.section("compute");
  apply_sets(sections, o.sets);
  const NetworkOptions net = read_section<NetworkOptions>(sections, "network", o.sets);
  const ComputeOptions compute = read_section<ComputeOptions>(sections, "compute", o.sets);
  if (!net.timed()) {
    config_fail("network.preset", Json(net.preset),
                o.network.empty()
                    ? "the run had no network model: give one with --network PRESET (see "
                      "`bitlab list`)"
                    : "recost needs a network: a preset (see `bitlab list`) or \"custom\"");
  }
  res.topology = make_topology(net, run.workers);
  res.compute = compute;
  res.label = !o.label.empty() ? o.label
              : net.file.empty() ? net.preset
                                 : res.topology.name.substr(res.topology.name.find(':') + 1);
  if (!recost_label_ok(res.label)) {
    throw ConfigError("--label " + res.label +
                      ": must be non-empty and use only letters, digits, '_', '-', '.' and '+'");
  }
  const Json own = run.section("network");
  if (own.contains("preset") && own.at("preset").is_string()) {
    res.old_network = own.at("preset").get<std::string>();
  }
  if (compute.straggler_worker >= run.workers) {
    config_fail("compute.straggler_worker", Json(compute.straggler_worker),
                "must be < cluster.workers (" + std::to_string(run.workers) + ") or -1");
  }
}

// metrics.csv's columns, and where the label's four columns go in the output.
struct MetricsLayout {
  std::string out_header;
  size_t width = 0;      // columns in the input
  size_t out_width = 0;  // columns in the output
  int step_col = -1;
  int old_time_col = -1;
  std::vector<size_t> out_index;  // of each new column, in recost_columns order
};

MetricsLayout read_metrics_layout(LineReader& metrics, const RecostOptions& o, RecostResult& res) {
  std::string header;
  if (!metrics.next(header)) metrics.fail("empty file; expected a header starting with \"step\"");
  std::vector<std::string> columns;
  {
    std::vector<std::string_view> f;
    split_csv(header, f);
    for (auto v : f) columns.emplace_back(v);
  }
  auto find_column = [&](const std::string& name) -> int {
    for (size_t k = 0; k < columns.size(); ++k) {
      if (columns[k] == name) return static_cast<int>(k);
    }
    return -1;
  };
  MetricsLayout m;
  m.step_col = find_column("step");
  if (m.step_col < 0) metrics.fail("no \"step\" column in the header");
  m.old_time_col = find_column("sim_time_s");
  m.width = m.out_width = columns.size();
  m.out_header = header;
  for (const auto& name : recost_columns(res.label)) {
    const int k = find_column(name);
    if (k < 0) {
      m.out_index.push_back(m.out_width++);
      m.out_header += "," + name;
    } else if (!o.force) {
      throw ConfigError(res.metrics_path + ": already has the columns of label \"" + res.label +
                        "\" (" + name +
                        "); choose another --label, or pass --force to replace them");
    } else {
      res.replaced = true;
      m.out_index.push_back(static_cast<size_t>(k));
    }
  }
  return m;
}

// Prices every row of `metrics` (after its header) with the comm log's
// records of that step and writes it, with the label's columns, to `out`.
void reprice_rows(LineReader& metrics, CommLogReader& comm_log, const MetricsLayout& m,
                  const RunConfig& run, const std::vector<double>& base_s, std::ostream& out,
                  RecostResult& res) {
  out << m.out_header << '\n';
  std::string line;
  std::vector<std::string_view> fields;
  std::vector<std::string> row(m.out_width);
  std::vector<CommRecord> records;
  std::vector<double> worker_s(static_cast<size_t>(run.workers));
  int64_t last_step = 0;
  double sim_time_s = 0;
  while (metrics.next(line)) {
    if (line.empty()) continue;
    split_csv(line, fields);
    if (fields.size() != m.width) {
      metrics.fail("expected " + std::to_string(m.width) + " columns, found " +
                   std::to_string(fields.size()));
    }
    const int64_t step = parse_int(metrics, fields[m.step_col], "step");
    if (step <= last_step) {
      metrics.fail("step " + std::to_string(step) + " comes after step " +
                   std::to_string(last_step) + " (steps must increase from 1)");
    }
    last_step = step;
    if (m.old_time_col >= 0 && !fields[m.old_time_col].empty()) {
      res.old_sim_time_s = parse_double(metrics, fields[m.old_time_col], "sim_time_s");
      res.has_old = true;
    }
    comm_log.records_for(step, records);
    // The same call as Simulation::step(): a run re-priced under its own
    // network reproduces its times to the bit.
    worker_compute_s(res.compute, base_s, run.seed, step, worker_s);
    const StepTime st = price_step(records, res.topology, worker_s, res.compute);
    sim_time_s += st.step_s;
    res.compute_s += st.compute_s;
    res.comm_s += st.comm_s;
    ++res.steps;
    res.collectives += static_cast<int64_t>(records.size());

    for (size_t k = 0; k < m.width; ++k) row[k].assign(fields[k]);
    const double values[4] = {st.compute_s, st.comm_s, st.step_s, sim_time_s};
    for (size_t j = 0; j < 4; ++j) row[m.out_index[j]] = fmt_number(values[j]);
    for (size_t k = 0; k < m.out_width; ++k) {
      if (k) out << ',';
      out << row[k];
    }
    out << '\n';
  }
  comm_log.finish();
  res.sim_time_s = sim_time_s;
}

}  // namespace

bool recost_label_ok(const std::string& label) {
  if (label.empty()) return false;
  for (char c : label) {
    const bool ok =
        std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '+';
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> recost_columns(const std::string& label) {
  return {"compute_s@" + label, "comm_s@" + label, "step_s@" + label, "sim_time_s@" + label};
}

namespace {

// A run re-priced into a temporary file beside its metrics.csv, not yet
// renamed over it: a sweep prices every run before it replaces any.
struct PricedRun {
  RecostResult result;
  fs::path tmp, target;
};

// Removes the temporary files of the runs it holds unless they were committed
// (renamed into place): an error anywhere leaves every metrics.csv as it was.
struct PricedRuns {
  std::vector<PricedRun> runs;
  bool committed = false;
  ~PricedRuns() {
    if (committed) return;
    for (const auto& r : runs) {
      std::error_code ignored;
      fs::remove(r.tmp, ignored);
    }
  }
  void commit() {
    for (const auto& r : runs) fs::rename(r.tmp, r.target);
    committed = true;
  }
};

// Reads and checks the run folder and prices every row into a temporary
// file; throws ConfigError (the temporary file removed) on any problem.
PricedRun price_run(const RecostOptions& o) {
  const fs::path dir(o.run_dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw ConfigError(o.run_dir + ": no such results folder");
  }
  const RunConfig run = read_run_config(dir);
  PricedRun priced;
  RecostResult& res = priced.result;
  read_new_model(o, run, res);
  const std::vector<double> base_s = worker_base_s(dir, run.json, res.compute, run.workers);

  priced.target = dir / "metrics.csv";
  res.metrics_path = priced.target.string();
  LineReader metrics(priced.target);
  CommLogReader comm_log(dir / "comm_log.csv");
  const MetricsLayout layout = read_metrics_layout(metrics, o, res);

  priced.tmp = priced.target.string() + ".recost.tmp";
  try {
    // A file that cannot be written is the CLI's exit 4 (IoError), as for a run.
    errno = 0;
    std::ofstream out(priced.tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      throw IoError("cannot write " + priced.tmp.string() + ": " +
                    (errno != 0 ? std::strerror(errno) : "cannot create the file"));
    }
    reprice_rows(metrics, comm_log, layout, run, base_s, out, res);
    errno = 0;
    out.flush();
    const int error = out ? 0 : errno;
    out.close();
    if (!out || error != 0) {
      throw IoError("cannot write " + priced.tmp.string() + ": " +
                    (error != 0 ? std::strerror(error) : "write error (disk full?)"));
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove(priced.tmp, ignored);
    throw;
  }
  return priced;
}

}  // namespace

RecostResult recost_run(const RecostOptions& o) {
  // Priced into a temporary file, then renamed: on any error metrics.csv is
  // left untouched.
  PricedRuns priced;
  priced.runs.push_back(price_run(o));
  priced.commit();
  return priced.runs.front().result;
}

bool is_sweep_folder(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "sweep.json", ec);
}

namespace {

// One csv line cut into its cells as they are written (quotes kept), so that
// rewriting a row changes only the cells it means to.
std::vector<std::string> raw_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (const char c : line) {
    if (c == '"') quoted = !quoted;  // "" inside quotes toggles twice: no net change
    if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

// A cell's text (quotes as sweep.csv writes them removed).
std::string unquoted(const std::string& cell) {
  if (cell.size() < 2 || cell.front() != '"' || cell.back() != '"') return cell;
  std::string out;
  for (size_t k = 1; k + 1 < cell.size(); ++k) {
    out += cell[k];
    if (cell[k] == '"' && cell[k + 1] == '"') ++k;
  }
  return out;
}

// sweep.csv with `columns` set in each row to the values of its run (named
// by the "dir" column, found by name: the runner's `warnings` and the columns
// an earlier recost added come after it); rows of runs not re-priced get empty cells. A column
// the header already has is refused, or with `force` rewritten in place.
std::string csv_with_columns(const fs::path& csv, const std::vector<std::string>& columns,
                             const std::map<std::string, std::vector<double>>& values,
                             bool force, bool* replaced = nullptr) {
  std::ifstream in(csv);
  std::string line, out;
  std::vector<size_t> index;  // of each of `columns` in the output rows
  if (!std::getline(in, line)) return out;  // empty: nothing to add to
  std::vector<std::string> cells = raw_cells(line);
  size_t dir_col = cells.size() - 1;
  for (size_t k = cells.size(); k-- > 0;) {
    if (unquoted(cells[k]) == "dir") {
      dir_col = k;
      break;
    }
  }
  for (const auto& c : columns) {
    const auto at = std::find_if(cells.begin(), cells.end(),
                                 [&](const std::string& h) { return unquoted(h) == c; });
    const bool found = at != cells.end();
    if (found && !force) {
      throw ConfigError(csv.string() + ": already has a column " + c +
                        " (give another --label, or --force to replace it)");
    }
    index.push_back(static_cast<size_t>(at - cells.begin()));  // cells.size() when new
    if (!found) cells.push_back(c);
    if (found && replaced) *replaced = true;
  }
  const size_t width = cells.size();
  auto append = [&out](const std::vector<std::string>& row) {
    for (size_t k = 0; k < row.size(); ++k) out += (k ? "," : "") + row[k];
    out += "\n";
  };
  append(cells);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    cells = raw_cells(line);
    const auto it = values.find(dir_col < cells.size() ? unquoted(cells[dir_col]) : "");
    cells.resize(std::max(cells.size(), width));
    for (size_t k = 0; k < columns.size(); ++k) {
      cells[index[k]] = it != values.end() ? fmt_number(it->second[k]) : "";
    }
    append(cells);
  }
  return out;
}

}  // namespace

SweepRecost recost_sweep(const RecostOptions& o) {
  const fs::path dir(o.run_dir);
  Json sweep;
  try {
    std::ifstream in(dir / "sweep.json");
    sweep = Json::parse(in);
  } catch (const std::exception&) {
    throw ConfigError((dir / "sweep.json").string() + ": unreadable");
  }
  SweepRecost out;
  std::map<std::string, std::vector<double>> values;  // run folder -> new columns
  std::string label;
  const fs::path csv = dir / "sweep.csv";
  std::error_code csv_ec;
  if (!o.label.empty() && fs::exists(csv, csv_ec)) {
    // A clash refused before any run is priced (the work would be wasted).
    (void)csv_with_columns(csv, {"comm_s@" + o.label, "sim_time_s@" + o.label}, values, o.force);
  }
  // Every run is priced (and so checked) before any is replaced: an error in
  // one leaves them all as they were.
  PricedRuns priced;
  std::vector<std::string> names;  // of priced.runs' folders
  for (const auto& r : sweep.value("runs", Json::array())) {
    const std::string name = r.value("dir", "");
    std::error_code ec;
    if (name.empty() || !fs::exists(dir / name / "comm_log.csv", ec) ||
        !fs::exists(dir / name / "metrics.csv", ec)) {
      out.skipped.push_back(name + ": no results yet");
      continue;
    }
    RecostOptions one = o;
    one.run_dir = (dir / name).string();
    try {
      priced.runs.push_back(price_run(one));
      names.push_back(name);
    } catch (const ConfigError& e) {
      throw ConfigError("run " + name + ": " + e.what(), e.path());
    }
    label = priced.runs.back().result.label;
    values[name] = {priced.runs.back().result.comm_s, priced.runs.back().result.sim_time_s};
  }
  std::string csv_text;  // sweep.csv's new text, made (and so checked) before any rename
  std::error_code ec;
  if (!label.empty() && fs::exists(csv, ec)) {
    out.csv_path = csv.string();
    csv_text = csv_with_columns(csv, {"comm_s@" + label, "sim_time_s@" + label}, values, o.force,
                                &out.csv_replaced);
  }
  priced.commit();
  for (size_t k = 0; k < names.size(); ++k) {
    out.runs.emplace_back(names[k], std::move(priced.runs[k].result));
  }
  if (!out.csv_path.empty()) write_text_atomic(out.csv_path, csv_text);
  return out;
}

}  // namespace bitlab
