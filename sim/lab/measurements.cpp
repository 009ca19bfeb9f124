#include "sim/lab/measurements.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace bitlab {

namespace {

[[noreturn]] void fail_at(const std::string& path, size_t line, const std::string& what) {
  throw ConfigError(path + (line ? ":" + std::to_string(line) : "") + ": " + what, path);
}

// Calls `each(line, number)` for every line of `path`, one at a time: a
// 100 MB table is never held whole (memory is bounded by the distinct
// measurements kept, MeasurementSet, not by the file's size).
template <class Each>
void for_each_line(const std::string& path, Each&& each) {
  if (std::filesystem::is_directory(path)) fail_at(path, 0, "is a folder, not a measurement file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_at(path, 0, "cannot be read (no such file, or not permitted)");
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    // A UTF-8 byte-order mark (spreadsheets write one) is not part of the header.
    if (n == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    if (line.find('\0') != std::string::npos) fail_at(path, n, "is not text");
    each(line, n);
  }
}

// The file's first line ("" if empty), to recognise its format.
std::string first_line(const std::string& path) {
  std::string first;
  if (std::filesystem::is_directory(path)) fail_at(path, 0, "is a folder, not a measurement file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_at(path, 0, "cannot be read (no such file, or not permitted)");
  std::getline(in, first);
  if (first.rfind("\xEF\xBB\xBF", 0) == 0) first.erase(0, 3);
  return first;
}

std::vector<std::string> tokens(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

// A number that must be > 0 (and finite), or the error names its column.
double positive_number(const std::string& text, const std::string& path, size_t line,
                       const std::string& column) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty())
    fail_at(path, line, column + " = \"" + text + "\": must be a number");
  if (!(v > 0) || !std::isfinite(v))
    fail_at(path, line, column + " = " + text + ": must be > 0 (a measured size and time are positive)");
  return v;
}

int whole_count(const std::string& text, const std::string& path, size_t line,
                const std::string& column) {
  const double v = positive_number(text, path, line, column);
  if (v != std::floor(v) || v > 1e7)
    fail_at(path, line, column + " = " + text + ": must be a whole number from 1 to 10^7");
  return static_cast<int>(v);
}

// ---- nccl-tests ------------------------------------------------------------

// The columns of one nccl-tests table: header names in order, and the time
// unit (seconds per unit).
struct NcclTable {
  std::vector<std::string> names;
  int size_col = -1, time_col = -1, wrong_col = -1;
  double seconds_per_unit = 1e-6;
};

// Reads the header line (after '#') and the units line under it.
NcclTable nccl_table(const std::string& header, const std::string& units, const std::string& path,
                     size_t line) {
  NcclTable t;
  t.names = tokens(header.substr(1));
  for (int i = 0; i < static_cast<int>(t.names.size()); ++i) {
    const std::string& n = t.names[i];
    if (n == "size" && t.size_col < 0) t.size_col = i;
    if ((n == "time" || n == "cputime") && t.time_col < 0) t.time_col = i;
    if (n == "#wrong" && t.wrong_col < 0) t.wrong_col = i;
  }
  if (t.size_col < 0 || t.time_col < 0)
    fail_at(path, line, "nccl-tests table without a \"size\" and a \"time\" column (missing columns)");
  // Units are printed only under the columns that have one, in order.
  static const std::set<std::string> kWithUnit = {"size", "count", "time", "cputime", "algbw",
                                                  "busbw", "i_min", "i_max", "i_p99", "i_cv%"};
  const std::vector<std::string> u = tokens(units.size() > 1 ? units.substr(1) : "");
  size_t k = 0;
  std::set<std::string> time_units;
  for (const auto& n : t.names) {
    if (!kWithUnit.count(n)) continue;
    if (k >= u.size()) fail_at(path, line + 1, "the units line has fewer units than the header has columns");
    if (n == "time" || n == "cputime") time_units.insert(u[k]);
    if (n == "size" && u[k] != "(B)")
      fail_at(path, line + 1, "size is in " + u[k] + ": only bytes \"(B)\" are understood");
    ++k;
  }
  if (time_units.size() > 1)
    fail_at(path, line + 1, "the time columns mix units (" + *time_units.begin() + " and " +
                                *time_units.rbegin() + "): give one file per unit");
  const std::string unit = time_units.empty() ? "(us)" : *time_units.begin();
  if (unit == "(us)") t.seconds_per_unit = 1e-6;
  else if (unit == "(ms)") t.seconds_per_unit = 1e-3;
  else if (unit == "(s)") t.seconds_per_unit = 1.0;
  else fail_at(path, line + 1, "time unit " + unit + ": must be (us), (ms) or (s)");
  return t;
}

// The collective a file's name or test line names ("" if none).
std::string collective_from(const std::string& text) {
  static const std::pair<const char*, const char*> kNames[] = {
      {"all_reduce", "allreduce"},         {"allreduce", "allreduce"},
      {"all_gather", "allgather"},         {"allgather", "allgather"},
      {"reduce_scatter", "reduce_scatter"}, {"reducescatter", "reduce_scatter"},
      {"alltoall", "alltoall"},            {"all_to_all", "alltoall"}};
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const auto& [pattern, name] : kNames)
    if (lower.find(pattern) != std::string::npos) return name;
  return "";
}

// The ranks of one nccl-tests run, per host ("#  Rank N ... on HOST").
struct RankCount {
  int ranks = 0;
  std::map<std::string, int> per_host;
};

// One data row of an nccl-tests table, as a measurement.
Measurement nccl_row(const std::vector<std::string>& cells, const NcclTable& t,
                     const std::string& path, size_t line) {
  if (cells.size() != t.names.size())
    fail_at(path, line, std::to_string(cells.size()) + " columns where the header has " +
                            std::to_string(t.names.size()));
  if (t.wrong_col >= 0 && cells[t.wrong_col] != "N/A" && cells[t.wrong_col] != "0")
    fail_at(path, line, "#wrong = " + cells[t.wrong_col] +
                            ": the collective gave wrong results, so its time is not used");
  Measurement m;
  m.bytes = positive_number(cells[t.size_col], path, line, "size");
  m.time_s = positive_number(cells[t.time_col], path, line, "time") * t.seconds_per_unit;
  m.origin = path + ":" + std::to_string(line);
  return m;
}

// "3 on a, 5 on b": the ranks per host, for the uneven-hosts message.
std::string hosts_text(const RankCount& rc) {
  std::string s;
  int shown = 0;
  for (const auto& [host, n] : rc.per_host) {
    if (shown++ == 6) return s + ", ...";
    s += (s.empty() ? "" : ", ") + std::to_string(n) + " on " + host;
  }
  return s;
}

// The section's rows (`rows`: keyed by size only; ranks unknown until its
// end) with the section's collective, nodes and ranks per node, into `out`.
void finish_section(const MeasurementSet& rows, const std::string& collective, const RankCount& rc,
                    const MeasurementReadOptions& o, const std::string& path, size_t line,
                    MeasurementSet& out) {
  if (rows.points().empty()) return;
  int nodes = static_cast<int>(rc.per_host.size()), g = 0;
  if (rc.ranks > 0) {
    // Every host must hold as many ranks: the model has one gpus_per_node
    // (an srun with uneven tasks per node gives 3 + 5; fitting that as 2 x 4
    // would price links the run did not use).
    for (const auto& [host, n] : rc.per_host) {
      if (n != rc.per_host.begin()->second)
        fail_at(path, line, std::to_string(rc.ranks) + " ranks on " + std::to_string(nodes) +
                                " hosts, " + hosts_text(rc) +
                                ": the hosts must hold the same number of ranks (the model has "
                                "one gpus_per_node; measure with srun --ntasks-per-node=N)");
    }
    g = rc.ranks / nodes;
  } else if (o.nodes > 0 && o.gpus_per_node > 0) {
    nodes = o.nodes;
    g = o.gpus_per_node;
  } else {
    fail_at(path, line, "no \"#  Rank N ... on HOST\" lines tell the ranks: give --nodes and --gpus-per-node");
  }
  if (collective.empty())
    fail_at(path, line, "which collective? Neither a \"# Collective test starting:\" line nor the "
                        "file's name says: give --collective");
  for (Measurement m : rows.points()) {
    m.collective = collective;
    m.nodes = nodes;
    m.gpus_per_node = g;
    out.add(m);
  }
}

// A run of nccl-tests (one "# nThread" header, its "#  Rank" lines, its
// table) is a section; a file may hold several, one after another.
struct NcclSection {
  std::string collective;
  RankCount ranks;
  MeasurementSet rows;
  NcclTable table;
  bool have_table = false;
  size_t first_line = 0;
};

void read_nccl_tests(const std::string& path, const MeasurementReadOptions& o, MeasurementSet& out) {
  const std::string named = !o.collective.empty()
                                ? canonical_collective(o.collective)
                                : collective_from(std::filesystem::path(path).filename().string());
  NcclSection sec;
  sec.collective = named;
  const auto next_section = [&](size_t n) {
    finish_section(sec.rows, sec.collective, sec.ranks, o, path, sec.first_line, out);
    const std::string keep = sec.collective;
    sec = NcclSection{};
    sec.collective = keep;
    sec.first_line = n;
  };
  std::string pending_header;  // a "# size ..." line waiting for its units line
  size_t pending_line = 0;
  for_each_line(path, [&](const std::string& s, size_t n) {
    if (!pending_header.empty()) {
      sec.table = nccl_table(pending_header, s, path, pending_line);
      sec.have_table = true;
      pending_header.clear();
      return;
    }
    if (s.rfind("# Collective test starting:", 0) == 0 || s.rfind("# nThread", 0) == 0) {
      // A new run (nccl-tests prints both lines at its start, in either order
      // across versions: only one of them starts the section).
      if (!sec.rows.points().empty() || sec.ranks.ranks > 0) next_section(n);
      const std::string c = collective_from(s);
      if (!c.empty() && s.rfind("# Collective", 0) == 0) sec.collective = c;
    } else if (s.rfind("#  Rank", 0) == 0) {
      // Rank lines after rows: the next run (a file of runs pasted together).
      if (!sec.rows.points().empty()) next_section(n);
      const auto on = s.find(" on ");
      const auto t = on == std::string::npos ? std::vector<std::string>{} : tokens(s.substr(on + 4));
      if (t.empty()) fail_at(path, n, "a \"#  Rank\" line without \"on HOST\"");
      ++sec.ranks.ranks;
      ++sec.ranks.per_host[t[0]];
    } else if (!s.empty() && s[0] == '#') {
      const auto t = tokens(s.substr(1));
      if (t.size() > 2 && t[0] == "size") {
        pending_header = s;
        pending_line = n;
      }
    } else if (!s.empty() && sec.have_table) {
      const auto cells = tokens(s);
      if (cells.empty() || cells[0] == "0") return;  // nccl-tests' size 0 rows time nothing
      sec.rows.add(nccl_row(cells, sec.table, path, n));
    }
  });
  if (!pending_header.empty()) sec.table = nccl_table(pending_header, "", path, pending_line);
  next_section(0);
  if (out.points().empty())
    fail_at(path, 0, "no nccl-tests table rows found (a \"#  size  count ...\" header and rows under it)");
}

// ---- CSV -------------------------------------------------------------------

std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) {
    const auto a = cell.find_first_not_of(" \t\"");
    const auto b = cell.find_last_not_of(" \t\"");
    cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
  }
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

// The columns of a CSV, by header name (trimmed, any case, any order): a
// name given twice is refused, as is a header without the needed columns.
// The time may be in ms, us or s (time_ms, time_us, time_s: exactly one).
struct CsvColumns {
  size_t count = 0;
  size_t collective = 0, nodes = 0, gpus_per_node = 0, bytes = 0, time = 0;
  std::string time_name;
  double seconds_per_unit = 1e-3;
};

CsvColumns csv_columns(const std::string& line, const std::string& path) {
  static const char* kNeeded = "the header must name collective, nodes, gpus_per_node, bytes and "
                               "one of time_ms, time_us, time_s";
  const auto header = csv_cells(line);
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) {
    std::string name = header[i];
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (name.empty()) continue;
    if (!col.emplace(name, i).second)
      fail_at(path, 1, "column \"" + header[i] + "\" is named twice (columns " +
                           std::to_string(col[name] + 1) + " and " + std::to_string(i + 1) +
                           "): which one holds the values?");
  }
  CsvColumns c;
  c.count = header.size();
  for (const auto& [name, slot] : {std::pair{"collective", &c.collective}, std::pair{"nodes", &c.nodes},
                                   std::pair{"gpus_per_node", &c.gpus_per_node},
                                   std::pair{"bytes", &c.bytes}}) {
    if (!col.count(name))
      fail_at(path, 1, std::string("column \"") + name + "\" is missing (" + kNeeded + ")");
    *slot = col[name];
  }
  for (const auto& [name, unit] : {std::pair{"time_ms", 1e-3}, std::pair{"time_us", 1e-6},
                                   std::pair{"time_s", 1.0}}) {
    if (!col.count(name)) continue;
    if (!c.time_name.empty())
      fail_at(path, 1, "columns \"" + c.time_name + "\" and \"" + name +
                           "\" both give the time: keep one");
    c.time = col[name];
    c.time_name = name;
    c.seconds_per_unit = unit;
  }
  if (c.time_name.empty()) fail_at(path, 1, std::string("no time column (") + kNeeded + ")");
  return c;
}

void read_csv(const std::string& path, MeasurementSet& out) {
  CsvColumns col;
  bool have_header = false;
  for_each_line(path, [&](const std::string& line, size_t n) {
    if (n == 1) {
      if (line.find_first_not_of(" \t") == std::string::npos)
        fail_at(path, 1, "the first line is empty (expected a header: collective,nodes,gpus_per_node,bytes,time_ms)");
      col = csv_columns(line, path);
      have_header = true;
      return;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    const auto cells = csv_cells(line);
    if (cells.size() != col.count)
      fail_at(path, n, std::to_string(cells.size()) + " cells where the header has " +
                           std::to_string(col.count));
    Measurement m;
    m.collective = canonical_collective(cells[col.collective]);
    if (m.collective.empty())
      fail_at(path, n, "collective = \"" + cells[col.collective] +
                           "\": must be allreduce, allgather, reduce_scatter or alltoall");
    m.nodes = whole_count(cells[col.nodes], path, n, "nodes");
    m.gpus_per_node = whole_count(cells[col.gpus_per_node], path, n, "gpus_per_node");
    m.bytes = positive_number(cells[col.bytes], path, n, "bytes");
    m.time_s = positive_number(cells[col.time], path, n, col.time_name) * col.seconds_per_unit;
    m.origin = path + ":" + std::to_string(n);
    out.add(m);
  });
  if (!have_header) fail_at(path, 0, "is empty (expected a header: collective,nodes,gpus_per_node,bytes,time_ms)");
  if (out.points().empty()) fail_at(path, 0, "has a header but no rows");
}

// ---- probe.json (bitlab probe) ----------------------------------------------


// Field `name` of result `i`, which must be there and of the right kind.
const Json& probe_field(const Json& row, const std::string& where, const char* name,
                        const std::string& path) {
  if (!row.contains(name))
    fail_at(path, 0, where + "." + name + " is missing (every result names collective, "
                     "compressed, nodes, ranks_per_node, bytes, time_us and wrong)");
  return row.at(name);
}

double probe_number(const Json& row, const std::string& where, const char* name,
                    const std::string& path) {
  const Json& v = probe_field(row, where, name, path);
  if (!v.is_number())
    fail_at(path, 0, where + "." + name + " = " + show_value(v) + ": must be a number");
  const double x = v.get<double>();
  if (!(x > 0) || !std::isfinite(x))
    fail_at(path, 0, where + "." + name + " = " + show_value(v) +
                         ": must be > 0 (a measured size and time are positive)");
  return x;
}

int probe_count(const Json& row, const std::string& where, const char* name,
                const std::string& path) {
  const double v = probe_number(row, where, name, path);
  if (v != std::floor(v) || v > 1e7)
    fail_at(path, 0, where + "." + name + " = " + show_value(row.at(name)) +
                         ": must be a whole number from 1 to 10^7");
  return static_cast<int>(v);
}

// One result of probe.json as a measurement; compressed collectives are not
// (the model prices them from their records: they check it, not fit it).
std::optional<Measurement> probe_row(const Json& row, size_t i, const std::string& path) {
  const std::string where = "results[" + std::to_string(i) + "]";
  if (!row.is_object()) fail_at(path, 0, where + ": must be an object");
  const Json& compressed = probe_field(row, where, "compressed", path);
  if (!compressed.is_boolean())
    fail_at(path, 0, where + ".compressed = " + show_value(compressed) + ": must be true or false");
  const Json& wrong = probe_field(row, where, "wrong", path);
  if (!wrong.is_number_integer() || wrong.get<int64_t>() < 0)
    fail_at(path, 0, where + ".wrong = " + show_value(wrong) + ": must be a whole number >= 0");
  if (wrong.get<int64_t>() > 0)
    fail_at(path, 0, where + ".wrong = " + show_value(wrong) +
                         ": the collective gave wrong results, so its time is not used "
                         "(rerun bitlab probe once the MPI installation is fixed)");
  const Json& name = probe_field(row, where, "collective", path);
  if (!name.is_string()) fail_at(path, 0, where + ".collective = " + show_value(name) + ": must be a string");
  Measurement m;
  m.nodes = probe_count(row, where, "nodes", path);
  m.gpus_per_node = probe_count(row, where, "ranks_per_node", path);
  m.bytes = probe_number(row, where, "bytes", path);
  m.time_s = probe_number(row, where, "time_us", path) * 1e-6;
  m.origin = path + ": " + where;
  if (compressed.get<bool>()) return std::nullopt;
  m.collective = canonical_collective(name.get<std::string>());
  if (m.collective.empty())
    fail_at(path, 0, where + ".collective = " + show_value(name) +
                         ": must be allreduce, allgather, reduce_scatter or alltoall (or "
                         "compressed: true)");
  return m;
}

// A probe file is JSON, parsed whole: past this size it is refused (bitlab
// probe writes ~300 bytes a result, so this is ~200 000 results).
constexpr std::uintmax_t kMaxProbeBytes = 64u << 20;

void read_probe(const std::string& path, MeasurementSet& out_set) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxProbeBytes)
    fail_at(path, 0, std::to_string(size >> 20) + " MB: a probe file is read whole, so at most " +
                         std::to_string(kMaxProbeBytes >> 20) + " MB (split it, or probe fewer sizes)");
  std::string text;
  for_each_line(path, [&text](const std::string& l, size_t) { text += l + "\n"; });
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::parse_error& e) {
    fail_at(path, 0, std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail_at(path, 0, "must be a JSON object (a probe file, written by bitlab probe)");
  if (!j.contains("format"))
    fail_at(path, 0, std::string("format is missing: a probe file says \"format\": \"") +
                         kProbeFormat + "\" (bitlab probe writes it)");
  if (j.at("format") != kProbeFormat)
    fail_at(path, 0, "format = " + show_value(j.at("format")) + ": must be \"" + kProbeFormat +
                         "\" (a probe file of the version this bitlab reads; rerun bitlab probe)");
  if (!j.contains("results") || !j.at("results").is_array() || j.at("results").empty())
    fail_at(path, 0, "results: must be a non-empty array of timed collectives");
  for (size_t i = 0; i < j.at("results").size(); ++i) {
    if (auto m = probe_row(j.at("results")[i], i, path)) out_set.add(*m);
  }
  if (out_set.points().empty())
    fail_at(path, 0, "results: no standard collective (allreduce, allgather, reduce_scatter, "
                     "alltoall) to fit: probe without --collectives, or with some of these");
}

}  // namespace

std::string canonical_collective(const std::string& name) { return collective_from(name); }

std::vector<Measurement> read_measurements(const std::string& path,
                                           const MeasurementReadOptions& o) {
  if (o.format != "auto" && o.format != "nccl-tests" && o.format != "csv" && o.format != "probe")
    throw ConfigError("--format " + o.format + ": " +
                          one_of_message(o.format, {"auto", "nccl-tests", "csv", "probe"}),
                      "--format");
  const std::string first = first_line(path);
  std::string format = o.format;
  if (format == "auto") {
    const bool csv_name = std::filesystem::path(path).extension() == ".csv";
    const bool csv_header = first.find("collective") != std::string::npos &&
                            first.find(',') != std::string::npos;
    const bool json_name = std::filesystem::path(path).extension() == ".json";
    const auto lead = first.find_first_not_of(" \t");
    const bool json_start = lead != std::string::npos && first[lead] == '{';
    format = json_name || json_start ? "probe" : csv_name || csv_header ? "csv" : "nccl-tests";
  }
  MeasurementSet set;
  if (format == "probe") read_probe(path, set);
  else if (format == "csv") read_csv(path, set);
  else read_nccl_tests(path, o, set);
  return set.points();
}

}  // namespace bitlab
