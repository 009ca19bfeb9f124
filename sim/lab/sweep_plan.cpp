// `bitlab sweep --dry-run` (sim/lab/sweep.hpp): the runs a sweep would run and
// what differs between their resolved experiments, without running or
// writing anything.
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "sim/lab/sweep.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

// Every leaf of a resolved experiment by its dotted path (arrays are leaves).
void flatten(const Json& j, const std::string& prefix, std::map<std::string, Json>& out) {
  if (!j.is_object()) {
    out[prefix] = j;
    return;
  }
  for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
}

}  // namespace

std::string sweep_plan_text(const SweepSpec& spec, const SweepOptions& o) {
  std::vector<std::map<std::string, Json>> flat(spec.runs.size());
  for (size_t i = 0; i < spec.runs.size(); ++i) flatten(spec.runs[i].config, "", flat[i]);
  // A path differs when some run lacks it or two runs give it different values.
  std::set<std::string> all, differing;
  for (const auto& f : flat) {
    for (const auto& [path, v] : f) all.insert(path);
  }
  for (const auto& path : all) {
    const Json* first = nullptr;
    for (const auto& f : flat) {
      const auto it = f.find(path);
      if (it == f.end()) {
        differing.insert(path);
        break;
      }
      if (first == nullptr) {
        first = &it->second;
      } else if (*first != it->second) {
        differing.insert(path);
        break;
      }
    }
  }
  const fs::path dir =
      o.out_dir.empty() ? fs::path(o.results_root) / spec.name : fs::path(o.out_dir);
  std::string text = "sweep " + spec.name + ": " + std::to_string(spec.runs.size()) +
                     " run" + (spec.runs.size() == 1 ? "" : "s") + " into " + dir.string() +
                     " (dry run: nothing run or written)\n";
  text += "  what differs between the resolved runs (every other setting is the same in all):\n";
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    std::string diff;
    for (const auto& path : differing) {
      const auto it = flat[i].find(path);
      if (it == flat[i].end()) continue;  // this run has no such setting
      diff += (diff.empty() ? "" : " ") + path + "=" + sweep_value_text(it->second);
    }
    text += "  " + spec.runs[i].dir_name + ": " + (diff.empty() ? "(same as the others)" : diff) +
            "\n";
  }
  for (const auto& w : spec.warnings) text += "  warning: " + w + "\n";
  return text;
}

}  // namespace bitlab
