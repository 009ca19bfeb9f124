// The option catalogue (catalogue.hpp): every problem, optimizer and
// compressor with its options and defaults, the experiment and cluster
// fields, the network presets — as text (`bitlab list`) or JSON (`bitlab list
// --json`, bitlab.list()). Everything is read from the schemas and
// registries, so a newly registered optimizer or problem is listed without
// touching this file.
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "optimizers/onebit_stages.hpp"
#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/error_feedback.hpp"
#include "sim/engine/catalogue.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/timing/network.hpp"

namespace bitlab {

namespace {

// printf into a string.
void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  if (n > 0) {
    const size_t at = out.size();
    out.resize(at + static_cast<size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<size_t>(n) + 1, format, args);
    out.resize(at + static_cast<size_t>(n));
  }
  va_end(args);
}

void print_fields(std::string& out, const std::vector<FieldInfo>& fields) {
  size_t w = 0, tw = 0, dw = 0;
  for (const auto& f : fields) {
    w = std::max(w, f.name.size());
    tw = std::max(tw, f.type.size());
    dw = std::max(dw, f.default_value.dump().size());
  }
  for (const auto& f : fields) {
    appendf(out, "    %-*s  %-*s  default %-*s  %s", static_cast<int>(w), f.name.c_str(),
            static_cast<int>(tw), f.type.c_str(), static_cast<int>(dw),
            f.default_value.dump().c_str(), f.doc.c_str());
    if (!f.rule.empty()) appendf(out, " [%s]", f.rule.c_str());
    appendf(out, "\n");
  }
}

Json fields_json(const std::vector<FieldInfo>& fields) {
  Json a = Json::array();
  for (const auto& f : fields) {
    a.push_back({{"name", f.name},
                 {"type", f.type},
                 {"default", f.default_value},
                 {"rule", f.rule},
                 {"doc", f.doc}});
  }
  return a;
}

}  // namespace

Json list_options_json() {
  const auto run_fields = RunSettings::schema().describe();
  const auto cluster_fields = ClusterOptions::schema().describe();
  Json j = Json::object();
  j["experiment"] = fields_json(run_fields);
  j["cluster"] = fields_json(cluster_fields);
  for (const auto& e : problem_registry()) {
    j["problems"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
  }
  for (const auto& e : optimizer_registry()) {
    j["optimizers"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
  }
  for (const auto& e : compressor_registry()) {
    j["compressors"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
  }
  for (const auto& [name, note] : onebit_stage_notes()) j["onebit_stages"][name] = note;
  j["error_feedback"] = fields_json(ErrorFeedbackOptions::schema().describe());
  j["network"] = fields_json(NetworkOptions::schema().describe());
  j["compute"] = fields_json(ComputeOptions::schema().describe());
  for (const auto& p : network_presets()) {
    j["network_presets"][p.name] = {{"gpus_per_node", p.gpus_per_node},
                                    {"intra_latency_us", p.intra_latency_us},
                                    {"intra_bandwidth_gbps", p.intra_bandwidth_gbps},
                                    {"inter_latency_us", p.inter_latency_us},
                                    {"inter_bandwidth_gbps", p.inter_bandwidth_gbps},
                                    {"source", p.source}};
  }
  return j;
}

std::string format_list_options() {
  const auto run_fields = RunSettings::schema().describe();
  const auto cluster_fields = ClusterOptions::schema().describe();
  std::string out;
  appendf(out, "bitlab %s (%s)\n\n", bitlab_version(), bitlab_git_revision());
  appendf(out, "EXPERIMENT (top level of the JSON file)\n");
  print_fields(out, run_fields);
  appendf(out, "    problem    object     (required) {\"name\": <problem>, options...}\n");
  appendf(out, "    cluster    object     the simulated cluster, below\n");
  appendf(out, "    optimizer  object     (required) {\"name\": <optimizer>, options...}\n");
  appendf(out, "\nCLUSTER (\"cluster\": {...})\n");
  print_fields(out, cluster_fields);
  appendf(out, "\nPROBLEMS (\"problem\": {\"name\": ..., ...})\n");
  for (const auto& e : problem_registry()) {
    appendf(out, "  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields(out, e.fields);
  }
  appendf(out, "\nOPTIMIZERS (\"optimizer\": {\"name\": ..., ...})\n");
  for (const auto& e : optimizer_registry()) {
    appendf(out, "  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields(out, e.fields);
  }
  appendf(out, "\nCOMPRESSORS (used inside the optimizers' collectives; {\"name\": ..., ...})\n");
  for (const auto& e : compressor_registry()) {
    appendf(out, "  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields(out, e.fields);
  }
  appendf(out,
          "\nCOMPRESSED ALLREDUCE STAGES (worker_compressor / server_compressor of onebit_adam, "
          "apmsqueeze, onebit_lamb, zero_one_adam; docs/algorithms.md §1)\n");
  for (const auto& [name, note] : onebit_stage_notes()) {
    appendf(out, "  %-9s %s\n", name.c_str(), note.c_str());
  }
  appendf(out, "\nERROR FEEDBACK (per-worker error buffers of a compressed exchange)\n");
  print_fields(out, ErrorFeedbackOptions::schema().describe());
  appendf(out, "\nNETWORK (\"network\": {...}; the time model)\n");
  print_fields(out, NetworkOptions::schema().describe());
  appendf(out, "  presets (latency us / bandwidth Gbit/s, intra | inter-node NIC):\n");
  for (const auto& p : network_presets()) {
    appendf(out, "    %-22s %d GPUs/node  intra %g us %g Gbps | inter %g us %g Gbps\n      %s\n",
            p.name.c_str(), p.gpus_per_node, p.intra_latency_us, p.intra_bandwidth_gbps,
            p.inter_latency_us, p.inter_bandwidth_gbps, p.source.c_str());
  }
  appendf(out, "\nCOMPUTE (\"compute\": {...}; compute time per step for the time model)\n");
  print_fields(out, ComputeOptions::schema().describe());
  return out;
}

}  // namespace bitlab
