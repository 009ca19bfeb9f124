#include "sim/lab/cost.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string_view>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/core/human.hpp"
#include "sim/core/registry.hpp"
#include "sim/engine/config.hpp"

namespace bitlab {

// ---------------------------------------------------------------------------
// The spec

Schema<CostSettings> CostSettings::schema() {
  using O = CostSettings;
  Schema<O> s;
  s.field("description", &O::description, "free text: what this spec prices and why");
  s.field("params", &O::params,
          "parameters d of the model (the length of the communicated vector); required",
          // 2^50 ≈ 1.1e15 parameters, 1000× the largest models: byte counts
          // (params · bytes per element · workers) then stay far inside int64.
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(int64_t{1} << 50)});
  s.field("workers", &O::workers, "data-parallel workers n (GPUs); required",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(1 << 20)});
  s.field("steps", &O::steps, "training steps to price; required",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(int64_t{1} << 40)});
  s.field("samples_per_worker", &O::samples_per_worker,
          "samples per worker per (optimizer) step, all its micro-steps together; only used "
          "when compute.step_ms is 0 and the compute time is derived as "
          "flops_per_param_sample · params · samples / device_tflops",
          {rules::greater(0.0)});
  s.field("tensor_sizes", &O::tensor_sizes,
          "optional: the sizes of the model's tensors in order (they must sum to params), each "
          "priced as a 2-D tensor of its most square shape; without them a stand-in layout is "
          "priced (one matrix and a 1-D remainder). A 1-bit optimizer with granularity tensor "
          "needs them (one compressed allreduce per tensor, each padded on its own)",
          {Rule<std::vector<int64_t>>{[](const std::vector<int64_t>& v) {
                                        for (const int64_t x : v) {
                                          if (x < 1) return false;
                                        }
                                        return true;
                                      },
                                      "every size must be >= 1"}});
  s.field("tensor_rows", &O::tensor_rows,
          "optional, with tensor_sizes: each tensor's first dimension (PyTorch's shape[0]; 0 for "
          "a 1-D tensor), so that it is priced as rows x size/rows, as PowerSGD and LoCo view "
          "it, instead of its most square shape",
          {Rule<std::vector<int64_t>>{[](const std::vector<int64_t>& v) {
                                        for (const int64_t x : v) {
                                          if (x < 0) return false;
                                        }
                                        return true;
                                      },
                                      "every entry must be >= 0"}});
  s.field("gpu_memory_gb", &O::gpu_memory_gb,
          "optional: each GPU's memory in GB (10^9 bytes; a \"16 GB\" card holds 16 GiB = 17.18 "
          "GB); cost says whether the model states fit (activations and buffers not counted)",
          {rules::greater(0.0)});
  s.field("largest_layer_params", &O::largest_layer_params,
          "optional: parameters of the largest layer, for ZeRO-3's working buffer (4 bytes "
          "each, DeepSpeed's estimate_zero3_model_states_mem_needs); 0: the largest "
          "tensor_sizes entry, or left out",
          {rules::at_least<int64_t>(0)});
  s.check([](const O& o, const std::string& path) {
    if (o.tensor_rows.empty()) return;
    if (o.tensor_rows.size() != o.tensor_sizes.size()) {
      config_fail(join_path(path, "tensor_rows"), Json(o.tensor_rows),
                  "must have one entry per tensor_sizes entry (" +
                      std::to_string(o.tensor_sizes.size()) + ")");
    }
    for (size_t p = 0; p < o.tensor_rows.size(); ++p) {
      if (o.tensor_rows[p] > 0 && o.tensor_sizes[p] % o.tensor_rows[p] != 0) {
        config_fail(join_path(join_path(path, "tensor_rows"), std::to_string(p)),
                    Json(o.tensor_rows[p]),
                    "must divide tensor_sizes." + std::to_string(p) + " = " +
                        std::to_string(o.tensor_sizes[p]) + " (or be 0 for a 1-D tensor)");
      }
    }
  });
  s.check([](const O& o, const std::string& path) {
    int64_t sum = 0;
    for (const int64_t x : o.tensor_sizes) sum += x;
    if (!o.tensor_sizes.empty() && sum != o.params) {
      config_fail(join_path(path, "tensor_sizes"), Json(o.tensor_sizes),
                  "must sum to params = " + std::to_string(o.params) + " (they sum to " +
                      std::to_string(sum) + ")");
    }
  });
  s.allow_key("network").allow_key("compute").allow_key("optimizer").allow_key("zero");
  return s;
}

namespace {

// The zero section against the optimizer and the cluster (exit 2).
void check_zero(const CostSpec& spec) {
  const ZeroOptions& z = spec.zero;
  const std::string name = spec.optimizer.at("name").get<std::string>();
  (void)zero_model(spec.optimizer, z.stage);  // a stage the optimizer has no form for
  if (z.zero_quantized_gradients && (name != "loco" || z.stage != 3)) {
    config_fail("zero.zero_quantized_gradients", Json(true),
                "qgZ is LoCo's exchange in bitlab (DeepSpeed's qgZ without error feedback is not "
                "modelled): needs optimizer loco at stage 3 (here " + name + ", stage " +
                    std::to_string(z.stage) + ")");
  }
  if (name == "loco" && z.stage == 3 && !z.zero_quantized_gradients) {
    config_fail("zero.zero_quantized_gradients", Json(false),
                "LoCo under ZeRO-3 is DeepSpeed's qgZ with zeropp_loco_param: set it true");
  }
  const Topology t = make_topology(spec.network, spec.settings.workers);
  if (z.zero_hpz_partition_size > 1 && t.gpus_per_node % z.zero_hpz_partition_size != 0) {
    config_fail("zero.zero_hpz_partition_size", Json(z.zero_hpz_partition_size),
                "must divide the GPUs of a node (" + std::to_string(t.gpus_per_node) + " here)");
  }
}

CostSpec resolve_inner(const Json& raw) {
  if (!raw.is_object()) config_fail("", raw, "a cost spec must be a JSON object");
  for (const char* key : {"params", "workers", "steps"}) {
    if (!raw.contains(key)) {
      config_fail(key, Json(nullptr),
                  "missing (required; a spec field or --" + std::string(key) + ")");
    }
  }
  CostSpec spec;
  const auto settings_schema = CostSettings::schema();
  spec.settings = settings_schema.read(raw, "");

  if (!raw.contains("network")) {
    config_fail("network", Json(nullptr),
                "missing; give {\"preset\": ...} (see `bitlab list`) or --network PRESET");
  }
  const auto network_schema = NetworkOptions::schema();
  spec.network = network_schema.read(raw.at("network"), "network");
  if (!spec.network.timed()) {
    config_fail("network.preset", Json(spec.network.preset),
                "bitlab cost needs a network: a preset or \"custom\"");
  }
  make_topology(spec.network, spec.settings.workers);  // validates

  const auto compute_schema = ComputeOptions::schema();
  spec.compute =
      compute_schema.read(raw.contains("compute") ? raw.at("compute") : Json::object(), "compute");
  if (spec.compute.straggler_worker >= spec.settings.workers) {
    config_fail("compute.straggler_worker", Json(spec.compute.straggler_worker),
                "must be < workers (" + std::to_string(spec.settings.workers) + ") or -1");
  }

  // The optimizer section, through the registry (its defaults and rules).
  if (!raw.contains("optimizer")) {
    config_fail("optimizer", Json(nullptr),
                "missing; it must be an object with a \"name\" (or --optimizer NAME)");
  }
  const Json& opt = raw.at("optimizer");
  const auto& registry = optimizer_registry();
  std::vector<std::string> names;
  for (const auto& e : registry) names.push_back(e.name);
  if (!opt.is_object()) config_fail("optimizer", opt, "must be a JSON object with a \"name\"");
  if (!opt.contains("name")) {
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    config_fail("optimizer.name", Json(nullptr), "missing; one of: " + all);
  }
  const Json& name = opt.at("name");
  if (!name.is_string()) config_fail("optimizer.name", name, "must be a string");
  const auto* entry = find_entry(registry, name.get<std::string>());
  if (!entry) {
    config_fail("optimizer.name", name, one_of_message(name.get<std::string>(), names));
  }
  // "15%" of this job's steps, whatever the steps of the file it came from.
  spec.optimizer =
      entry->resolve(resolve_step_shares(opt, spec.settings.steps, "optimizer"), "optimizer");
  // Values only the cluster size can reject (the optimizers check them in setup()).
  const Json& granularity =
      spec.optimizer.contains("granularity") ? spec.optimizer.at("granularity") : Json(nullptr);
  if (granularity == Json("tensor") && spec.settings.tensor_sizes.empty()) {
    // The 1-bit family's per-tensor calls pay a padding and four collectives
    // per tensor: the stand-in layout (cost_tensor_layout) would misprice them.
    config_fail("optimizer.granularity", granularity,
                "needs the model's tensor sizes, and this cost spec gives only params: add "
                "\"tensor_sizes\" (the tensors' sizes in order, summing to params) or use "
                "\"group\"");
  }
  plan_communication(spec.optimizer, spec.settings.params, static_cast<int>(spec.settings.workers),
                     1, 0, cost_layout(spec.settings));
  spec.zero_given = raw.contains("zero");
  if (spec.zero_given) spec.zero = read_zero_options(raw.at("zero"), "zero");
  check_zero(spec);

  Json& r = spec.resolved = settings_schema.write(spec.settings);
  if (spec.settings.gpu_memory_gb == 0) r.erase("gpu_memory_gb");  // not given: not checked
  if (spec.zero_given) r["zero"] = ZeroOptions::schema().write(spec.zero);
  r["network"] = network_schema.write(spec.network);
  r["compute"] = compute_schema.write(spec.compute);
  r["optimizer"] = spec.optimizer;
  return spec;
}

}  // namespace

CostSpec resolve_cost_spec(const Json& raw,
                           const std::vector<std::pair<std::string, std::string>>& labels) {
  try {
    return resolve_inner(raw);
  } catch (const ConfigError& err) {
    // Name the override that caused an error at (or under) its path; the last
    // one applied wins, as it set the value.
    for (auto it = labels.rbegin(); it != labels.rend(); ++it) {
      const std::string path = it->first.substr(0, it->first.find('='));
      if (!err.path().empty() && (err.path() == path || err.path().rfind(path + ".", 0) == 0)) {
        throw ConfigError(it->second + ": " + err.what(), err.path());
      }
    }
    throw;
  }
}

CostSpec resolve_cost_request(Json raw, const std::vector<CostOverride>& overrides) {
  if (!raw.is_object()) config_fail("", raw, "a cost spec must be a JSON object");
  // An experiment file is priced as it stands, the overrides scaling it up.
  if (raw.contains("problem")) raw = cost_spec_of_experiment(raw);
  std::vector<std::string> notes;
  std::vector<std::pair<std::string, std::string>> labels;
  for (const auto& o : overrides) {
    apply_override(raw, o.assignment, o.label, notes);
    labels.emplace_back(o.assignment, o.label);
  }
  CostSpec spec = resolve_cost_spec(raw, labels);
  for (const auto& o : overrides) spec.overrides.push_back(o.label);
  spec.notes = std::move(notes);
  return spec;
}

// ---------------------------------------------------------------------------
// The plan

std::vector<TensorInfo> cost_layout(const CostSettings& s) {
  if (s.tensor_sizes.empty()) return cost_tensor_layout(s.params, static_cast<int>(s.workers));
  std::vector<TensorInfo> out;
  size_t offset = 0;
  for (size_t p = 0; p < s.tensor_sizes.size(); ++p) {
    const auto size = static_cast<size_t>(s.tensor_sizes[p]);
    const std::string name = "tensor" + std::to_string(p);
    if (s.tensor_rows.empty()) {
      out.push_back(square_tensor(name, offset, size));
    } else {
      const auto rows = static_cast<size_t>(s.tensor_rows[p]);
      out.push_back({name, offset, size, rows, rows == 0 ? 0 : size / rows});
    }
    offset += size;
  }
  return out;
}

std::vector<TensorInfo> cost_tensor_layout(int64_t params, int workers) {
  const size_t d = static_cast<size_t>(params), unit = 2 * static_cast<size_t>(workers);
  const size_t matrix = d / unit * unit;
  std::vector<TensorInfo> out;
  if (matrix > 0) out.push_back(square_tensor("weights", 0, matrix));
  if (d > matrix) out.push_back({"remainder", matrix, d - matrix});
  return out;
}

CommPlan plan_communication(const Json& opt, int64_t params, int n, int64_t steps,
                            int gpus_per_node, std::vector<TensorInfo> tensors) {
  const std::string name = opt.at("name").get<std::string>();
  const auto* entry = find_entry(optimizer_registry(), name);
  if (!entry) config_fail("optimizer.name", Json(name), "not a registered optimizer");
  // Constructing an optimizer only reads its options; setup() would allocate.
  PlanShape shape;
  shape.params = params;
  shape.workers = n;
  shape.steps = steps;
  shape.gpus_per_node = gpus_per_node;
  shape.tensors = std::move(tensors);
  CommPlan plan = entry->make(opt)->comm_plan(shape);
  plan.optimizer = name;
  return plan;
}

// ---------------------------------------------------------------------------
// Pricing

namespace {

// Adds a priced phase to a job: its volume, and its steps' totals.
void add_phase(JobCost& job, PhaseCost pc) {
  for (const auto& r : pc.plan.records) {
    pc.sent_bytes += r.sent_bytes;
    pc.messages += r.messages;
  }
  const int64_t steps = pc.plan.steps;
  job.total_s += static_cast<double>(steps) * pc.time.step_s;
  job.total_sent_bytes += static_cast<double>(steps) * pc.sent_bytes;
  job.total_messages += steps * pc.messages;
  job.phases.push_back(std::move(pc));
}

}  // namespace

JobCost price_plan(const CommPlan& plan, const Topology& topology, const ComputeOptions& compute,
                   const std::vector<double>& worker_compute_s, std::string label) {
  JobCost job;
  job.label = std::move(label);
  job.notes = plan.notes;
  for (const auto& p : plan.phases) {
    PhaseCost pc;
    pc.plan = p;
    pc.time = price_step(p.records, topology, worker_compute_s, compute);
    add_phase(job, std::move(pc));
  }
  return job;
}

namespace {

// What a job is priced with besides its plan (estimate_cost).
struct JobShape {
  ZeroShape zero;
  std::vector<TensorInfo> tensors;
  const Topology* topology = nullptr;
  const ComputeOptions* compute = nullptr;
  const std::vector<double>* worker_s = nullptr;
};

// price_plan under ZeRO: each phase rewritten by zero_phase and priced by
// price_zero_step (stage 0: the plan's own records through price_step, the
// same bits as price_plan).
JobCost price_zero_plan(const CommPlan& plan, const Json& optimizer, const ZeroOptions& z,
                        const JobShape& js, std::string label) {
  const ZeroModel model = zero_model(optimizer, z.stage);
  JobCost job;
  job.label = std::move(label);
  job.notes = plan.notes;
  for (const auto& p : plan.phases) {
    const ZeroPhase zp = zero_phase(p, model, z, js.zero, js.tensors,
                                    js.compute->gradient_accumulation_steps);
    PhaseCost pc;
    pc.plan = zp.plan;
    pc.time = price_zero_step(zp, z, *js.topology, *js.worker_s, *js.compute);
    add_phase(job, std::move(pc));
  }
  return job;
}

Json baseline_optimizer_json(const char* wire) {
  const auto& baseline = baseline_optimizer();
  return baseline.resolve(Json{{"name", baseline.name}, {"wire", wire}}, "optimizer");
}

// Whether DeepSpeed runs this optimizer at this ZeRO setting: stage 0 as
// before; above, LoCo only at stage 3 with qgZ, the 1-bit family never.
bool runs_in_deepspeed(const ZeroModel& m, const ZeroOptions& z) {
  if (z.stage == 0) return true;
  if (m.optimizer == "loco") return z.stage == 3 && z.zero_quantized_gradients;
  return m.in_deepspeed;
}

// The spec's ZeRO options at another stage: ZeRO++ only at stage 3, where
// LoCo runs as qgZ.
ZeroOptions at_stage(ZeroOptions z, int64_t stage, const std::string& optimizer) {
  z.stage = stage;
  if (stage < 3) {
    z.zero_quantized_weights = false;
    z.zero_hpz_partition_size = 1;
    z.zero_quantized_gradients = false;
  } else {
    z.zero_quantized_gradients = optimizer == "loco";
  }
  return z;
}

std::vector<PhaseLink> phase_links(const JobCost& job, const Topology& t) {
  std::vector<PhaseLink> out;
  for (const auto& p : job.phases) {
    LinkTimes sum;
    for (const auto& r : p.plan.records) {
      const LinkTimes l = collective_link_times(r, t);
      sum.intra_s += l.intra_s;
      sum.inter_s += l.inter_s;
    }
    PhaseLink link;
    link.phase = p.plan.name;
    link.comm_s = sum.intra_s + sum.inter_s;
    link.inter = sum.inter_s > sum.intra_s;
    link.share = link.comm_s > 0 ? (link.inter ? sum.inter_s : sum.intra_s) / link.comm_s : 0;
    out.push_back(link);
  }
  return out;
}

// The notes and warnings of a job's inputs: compute, the optimizer's own
// warnings, a fitted network used beyond the nodes it was fitted on.
void note_inputs(CostReport& rep, const CostSpec& spec) {
  const auto& s = spec.settings;
  if (spec.compute.jitter > 0) {
    rep.notes.push_back(
        "compute.jitter is ignored: cost prices the expected step, every worker at the base "
        "compute time (the slowest of n jittered workers is slower; use `bitlab run` for that)");
  }
  if (rep.compute_s == 0) {
    rep.notes.push_back(
        "compute is not modelled (compute.step_ms and compute.device_tflops are 0): times are "
        "communication only");
  }

  rep.warnings = spec.notes;
  // The optimizer's own warnings for a job of these steps, as `run` says
  // them before its first step (constructing it only reads its options).
  const std::string name = spec.optimizer.at("name").get<std::string>();
  for (auto& w : find_entry(optimizer_registry(), name)->make(spec.optimizer)->warnings(s.steps)) {
    rep.warnings.push_back(std::move(w));
  }
  const Topology& t = rep.topology;
  if (t.fitted_max_nodes > 0 && (t.nodes > t.fitted_max_nodes || t.nodes < t.fitted_min_nodes)) {
    rep.warnings.push_back(
        "the network file was fitted on measurements over " + std::to_string(t.fitted_min_nodes) +
        (t.fitted_max_nodes > t.fitted_min_nodes ? "-" + std::to_string(t.fitted_max_nodes) : "") +
        " node(s); this job spans " + std::to_string(t.nodes) +
        ": its prices extrapolate the fit (measure at this size, `bitlab calibrate`)");
  }

}

}  // namespace

CostReport estimate_cost(const CostSpec& spec) {
  CostReport rep;
  rep.spec = spec;
  const auto& s = spec.settings;
  const int n = static_cast<int>(s.workers);
  rep.topology = make_topology(spec.network, s.workers);
  rep.compute_s = base_compute_s(spec.compute, static_cast<double>(s.params), s.samples_per_worker);
  // Expected compute: no jitter; the straggler (deterministic) is kept.
  std::vector<double> worker_s(static_cast<size_t>(n), rep.compute_s);
  if (spec.compute.straggler_worker >= 0) {
    worker_s[static_cast<size_t>(spec.compute.straggler_worker)] *= spec.compute.straggler_factor;
  }
  note_inputs(rep, spec);
  const Topology& t = rep.topology;
  const std::string name = spec.optimizer.at("name").get<std::string>();
  const int node = n / t.nodes;  // workers per node
  const std::vector<TensorInfo> layout = cost_layout(s);
  JobShape js;
  js.zero.params = s.params;
  js.zero.workers = n;
  js.zero.gpus_per_node = node;
  js.zero.largest_layer_params = s.largest_layer_params;
  if (js.zero.largest_layer_params == 0 && !s.tensor_sizes.empty()) {
    js.zero.largest_layer_params = *std::max_element(s.tensor_sizes.begin(), s.tensor_sizes.end());
  }
  js.tensors = layout;
  js.topology = &t;
  js.compute = &spec.compute;
  js.worker_s = &worker_s;
  const auto& baseline = baseline_optimizer();
  rep.baseline = baseline.name;
  const auto price = [&](const ZeroOptions& z, StageCost* row) {
    const CommPlan plan = plan_communication(spec.optimizer, s.params, n, s.steps, node, layout);
    JobCost job = price_zero_plan(plan, spec.optimizer, z, js, name);
    ZeroOptions bz = z;
    bz.zero_quantized_gradients = false;
    const Json b16 = baseline_optimizer_json("fp16");
    JobCost base16 = price_zero_plan(plan_communication(b16, s.params, n, s.steps, node), b16, bz,
                                     js, baseline.name + ", fp16 allreduce");
    if (row) {
      row->total_s = job.total_s;
      row->baseline_total_s = base16.total_s;
      row->memory_bytes = zero_memory(zero_model(spec.optimizer, z.stage), z, js.zero).total_bytes;
      row->baseline_memory_bytes = zero_memory(zero_model(b16, z.stage), bz, js.zero).total_bytes;
      return;
    }
    rep.job = std::move(job);
    rep.baseline_fp16 = std::move(base16);
    const Json b32 = baseline_optimizer_json("fp32");
    rep.baseline_fp32 = price_zero_plan(plan_communication(b32, s.params, n, s.steps, node), b32,
                                        bz, js, baseline.name + ", fp32 allreduce");
    const ZeroModel model = zero_model(spec.optimizer, z.stage);
    rep.in_deepspeed = runs_in_deepspeed(model, z);
    rep.memory = zero_memory(model, z, js.zero);
    rep.baseline_memory = zero_memory(zero_model(b16, z.stage), bz, js.zero);
  };
  price(spec.zero, nullptr);
  for (int64_t stage = 0; stage <= 3; ++stage) {
    StageCost row;
    row.stage = stage;
    const ZeroOptions z = at_stage(spec.zero, stage, name);
    try {
      row.in_deepspeed = runs_in_deepspeed(zero_model(spec.optimizer, stage), z);
      price(z, &row);
      row.available = true;
    } catch (const ConfigError& e) {
      row.why_not = e.what();
    }
    rep.stages.push_back(row);
  }
  rep.links = phase_links(rep.job, t);
  if (!rep.in_deepspeed) {
    rep.warnings.push_back(name + " at ZeRO stage " + std::to_string(spec.zero.stage) +
                           " is not available in DeepSpeed (it refuses the combination): priced "
                           "as docs/algorithms.md section 11 composes them");
  }
  if (spec.zero.stage == 3 && js.zero.largest_layer_params == 0) {
    rep.notes.push_back(
        "ZeRO-3's working buffer (4 bytes per parameter of the largest layer) is left out of the "
        "memory: give largest_layer_params or tensor_sizes");
  }
  for (const auto& note : rep.job.notes) rep.notes.push_back(note);
  if (spec.optimizer.value("wire", "fp16") == "fp32") {
    // The papers' baseline allreduces in fp16; an fp32 warm-up against it
    // makes the compressed optimizer look slower in the warm-up than it is.
    rep.notes.push_back(
        "the optimizer's uncompressed allreduces (optimizer.wire) are fp32 while the papers' "
        "baseline is Adam with fp16: compare with the fp32 row, or price with --set "
        "optimizer.wire=fp16 to compare like with like");
  }
  return rep;
}

// ---------------------------------------------------------------------------
// Output

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Numbers for people: the shared formatting of sim/core/human.hpp.
std::string bytes_text(double b) {
  return human_bytes(b);
}

std::string duration_text(double s) {
  return human_duration(s);
}

double ratio(double a, double b) {
  return b > 0 ? a / b : std::numeric_limits<double>::quiet_NaN();
}

std::string ratio_text(double r) {
  return std::isfinite(r) ? fmt("%.2fx", r) : "n/a";
}

Json ratio_json(double r) {
  return std::isfinite(r) ? Json(r) : Json(nullptr);
}

std::string pad(std::string s, size_t w, bool right = true) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

void print_job_rows(std::string& out, const JobCost& job, double baseline_step_s) {
  for (const auto& p : job.phases) {
    out += "  " + pad(job.label + " / " + p.plan.name, 30, false) +
           pad(std::to_string(p.plan.steps), 9) + pad(fmt("%.2f", p.time.compute_s * 1e3), 11) +
           pad(fmt("%.2f", p.time.comm_s * 1e3), 11) + pad(fmt("%.2f", p.time.step_s * 1e3), 11) +
           pad(bytes_text(p.sent_bytes), 11) + pad(std::to_string(p.messages), 7) +
           pad(ratio_text(ratio(baseline_step_s, p.time.step_s)), 10) + "\n";
  }
  int64_t steps = 0;
  for (const auto& p : job.phases) steps += p.plan.steps;
  out += "  " + pad(job.label + " / total", 30, false) + pad(std::to_string(steps), 9) + "  time " +
         duration_text(job.total_s) + ", sent per worker " + bytes_text(job.total_sent_bytes) +
         "\n";
}

Json record_json(const CommRecord& r, const Topology& t) {
  return {{"op", r.op},
          {"algorithm", r.algorithm},
          {"dtype", r.dtype},
          {"scope", r.scope},
          {"ranks", r.ranks},
          {"groups", r.groups},
          {"payload_bytes", r.payload_bytes},
          {"sent_bytes", r.sent_bytes},
          {"messages", r.messages},
          {"time_s", collective_time_s(r, t)}};
}

Json job_json(const JobCost& job, const Topology& t, double baseline_step_s,
              const std::string& baseline) {
  Json phases = Json::array();
  for (const auto& p : job.phases) {
    Json recs = Json::array();
    for (const auto& r : p.plan.records) recs.push_back(record_json(r, t));
    phases.push_back({{"name", p.plan.name},
                      {"steps", p.plan.steps},
                      {"compute_s", p.time.compute_s},
                      {"compression_s", p.time.compression_s},
                      {"comm_s", p.time.comm_s},
                      {"step_s", p.time.step_s},
                      {"sent_bytes_per_worker", p.sent_bytes},
                      {"messages_per_worker", p.messages},
                      {"step_speedup_vs_" + baseline + "_fp16",
                       ratio_json(ratio(baseline_step_s, p.time.step_s))},
                      {"records", recs}});
  }
  return {{"label", job.label},
          {"total_s", job.total_s},
          {"total_sent_bytes_per_worker", job.total_sent_bytes},
          {"total_messages_per_worker", job.total_messages},
          {"phases", phases}};
}

double baseline_step_s(const CostReport& r) {
  return r.baseline_fp16.phases.empty() ? 0.0 : r.baseline_fp16.phases[0].time.step_s;
}

std::string memory_line(const std::string& label, const ZeroMemory& m) {
  std::string out = "  " + pad(label, 22, false) + pad(bytes_text(m.params_bytes), 11) +
                    pad(bytes_text(m.gradients_bytes), 11) +
                    pad(bytes_text(m.optimizer_state_bytes), 11) +
                    pad(bytes_text(m.error_buffer_bytes), 11) +
                    pad(bytes_text(m.working_bytes), 11) +
                    pad(bytes_text(static_cast<double>(m.total_bytes)), 11) + "\n";
  return out;
}

void print_memory(std::string& out, const CostReport& r) {
  const auto& s = r.spec.settings;
  out += "memory per GPU (model states at ZeRO stage " + std::to_string(r.spec.zero.stage) +
         ", DeepSpeed's accounting; activations and buffers not counted):\n";
  out += "  " + pad("", 22, false) + pad("params", 11) + pad("gradients", 11) + pad("optimizer", 11) +
         pad("errors", 11) + pad("working", 11) + pad("total", 11) + "\n";
  out += memory_line(r.job.label, r.memory);
  out += memory_line(r.baseline, r.baseline_memory);
  if (s.gpu_memory_gb > 0) {
    const double cap = s.gpu_memory_gb * 1e9;
    const auto verdict = [&](const std::string& who, const ZeroMemory& m) {
      const double need = static_cast<double>(m.total_bytes);
      return who + (need <= cap ? " fits" : " does NOT fit") + " (" + bytes_text(need) + " of " +
             bytes_text(cap) + ")";
    };
    out += "  --gpu-memory-gb " + fmt("%g", s.gpu_memory_gb) + ": " +
           verdict(r.job.label, r.memory) + "; " + verdict(r.baseline, r.baseline_memory) + "\n";
  }
  out += "\n";
}

void print_stages(std::string& out, const CostReport& r) {
  out += "by ZeRO stage (total time; memory per GPU; ZeRO++ options at stage 3 only):\n";
  out += "  " + pad("stage", 7, false) + pad(r.job.label + " time", 22) + pad("memory", 11) +
         pad(r.baseline + " fp16 time", 22) + pad("memory", 11) + "\n";
  for (const auto& row : r.stages) {
    out += "  " + pad(std::to_string(row.stage), 7, false);
    if (!row.available) {
      out += "  not priced: " + row.why_not + "\n";
      continue;
    }
    out += pad(duration_text(row.total_s), 22) +
           pad(bytes_text(static_cast<double>(row.memory_bytes)), 11) +
           pad(duration_text(row.baseline_total_s), 22) +
           pad(bytes_text(static_cast<double>(row.baseline_memory_bytes)), 11) +
           (row.in_deepspeed ? "" : "  (" + r.job.label + ": not available in DeepSpeed)") +
           "\n";
  }
  out += "\n";
}

void print_links(std::string& out, const CostReport& r) {
  out += "limiting link per phase (most of its communication time):\n";
  for (const auto& l : r.links) {
    if (l.comm_s <= 0) {
      out += "  " + r.job.label + " / " + l.phase + ": no communication\n";
      continue;
    }
    out += "  " + r.job.label + " / " + l.phase + ": " + link_text(l.inter, r.topology) + " (" +
           fmt("%.0f", 100 * l.share) + " %)\n";
  }
  out += "\n";
}

bool same_record(const CommRecord& a, const CommRecord& b) {
  return std::string_view(a.op) == b.op && std::string_view(a.dtype) == b.dtype &&
         std::string_view(a.scope) == b.scope && std::string_view(a.algorithm) == b.algorithm &&
         a.ranks == b.ranks && a.groups == b.groups && a.payload_bytes == b.payload_bytes;
}

void print_header(std::string& out, const CostReport& r) {
  const auto& s = r.spec.settings;
  out += "bitlab cost: " + r.job.label + ", " + std::to_string(s.params) + " parameters, " +
         std::to_string(s.workers) + " workers, " + std::to_string(s.steps) + " steps\n";
  const auto& overrides = r.spec.overrides;
  if (!s.description.empty() && overrides.empty()) out += "  " + s.description + "\n";
  if (!overrides.empty()) {
    // The file's description may describe what the overrides changed (a
    // warm-up, the network): it is shown as the file's, not this job's.
    if (!s.description.empty()) {
      out += "  the file (before the changes below): " + s.description + "\n";
    }
    std::string changed;
    for (const auto& o : overrides) changed += (changed.empty() ? "" : ", ") + o;
    out += "  priced with: " + changed + "\n";
  }
  for (const auto& w : r.warnings) out += "warning: " + w + "\n";
  if (r.spec.zero.stage > 0) {
    const auto& z = r.spec.zero;
    out += "ZeRO stage " + std::to_string(z.stage) + ": reduce_bucket_size " +
           std::to_string(z.reduce_bucket_size) + ", allgather_bucket_size " +
           std::to_string(z.allgather_bucket_size) + ", overlap_comm " +
           (z.overlap_comm ? "true" : "false") +
           (z.zero_quantized_weights ? ", qwZ (int8 weight all-gathers)" : "") +
           (z.zero_hpz_partition_size > 1
                ? ", hpZ " + std::to_string(z.zero_hpz_partition_size) + " GPUs"
                : "") +
           (z.zero_quantized_gradients ? ", qgZ (LoCo's exchange)" : "") +
           (r.in_deepspeed ? "" : "  [not available in DeepSpeed]") + "\n";
  }
}

}  // namespace

std::string format_cost_report(const CostReport& r) {
  const auto& t = r.topology;
  std::string out;
  print_header(out, r);
  out += "topology: " + t.name + ": " + std::to_string(t.nodes) + " node(s) x " +
         std::to_string(t.gpus_per_node) + " GPUs; intra " + fmt("%g us", t.intra_latency_s * 1e6) +
         ", " + fmt("%g Gbit/s", t.intra_bytes_per_s * 8 / 1e9) + "; inter (NIC per node) " +
         fmt("%g us", t.inter_latency_s * 1e6) + ", " +
         fmt("%g Gbit/s", t.inter_bytes_per_s * 8 / 1e9) + "; allreduce " + t.allreduce + "\n";
  out += "  source: " + t.source + "\n";
  out += "compute per step and worker: " + duration_text(r.compute_s);
  const int64_t micro = r.spec.compute.gradient_accumulation_steps;
  if (micro > 1) {
    out += " = " + std::to_string(micro) + " micro-steps (compute.gradient_accumulation_steps) of " +
           duration_text(r.compute_s / static_cast<double>(micro)) + "; one exchange per step";
  }
  out += r.spec.compute.step_ms > 0 ? (micro > 1 ? " (compute.step_ms per micro-step)\n"
                                                 : " (compute.step_ms)\n")
         : r.compute_s > 0          ? " (derived: flops_per_param_sample x params x "
                                      "samples_per_worker / device_tflops)\n"
                                    : " (not modelled)\n";
  if (r.spec.compute.overlap > 0) {
    out +=
        fmt("  overlap %.2f of backward hides uncompressed allreduces\n", r.spec.compute.overlap);
  }
  out += "\n";
  const double base = baseline_step_s(r);
  out += "  " + pad("optimizer / phase", 30, false) + pad("steps", 9) + pad("compute ms", 11) +
         pad("comm ms", 11) + pad("step ms", 11) + pad("sent/step", 11) + pad("msgs", 7) +
         pad("vs fp16", 10) + "\n";
  print_job_rows(out, r.job, base);
  print_job_rows(out, r.baseline_fp16, base);
  print_job_rows(out, r.baseline_fp32, base);
  out += "  (sent/step and msgs: per worker per step; vs fp16: " + r.baseline +
         " fp16's step time / this phase's)\n\n";

  out += "collectives per step (time on this topology):\n";
  for (const JobCost* job : {&r.job, &r.baseline_fp16}) {
    for (const auto& p : job->phases) {
      if (p.plan.steps == 0 && job != &r.job) continue;
      out += "  " + job->label + " / " + p.plan.name + ":" +
             (p.plan.records.empty() ? " none" : "") + "\n";
      const auto& recs = p.plan.records;
      for (size_t i = 0; i < recs.size();) {
        const auto& rec = recs[i];
        // Under ZeRO a bucket or micro-step repeats a record: shown once, x k.
        size_t k = 1;
        while (r.spec.zero.stage > 0 && i + k < recs.size() && same_record(recs[i + k], rec)) ++k;
        out += "    " +
               pad(std::string(rec.op) + " " + rec.algorithm + " " + rec.dtype +
                       (std::string_view(rec.scope) == "all" ? "" : std::string(" ") + rec.scope),
                   32, false) +
               "S " + pad(bytes_text(static_cast<double>(rec.payload_bytes)), 9) + "  p " +
               pad(std::to_string(rec.ranks), 5) + "  " +
               pad(duration_text(collective_time_s(rec, t)), 12) +
               (k > 1 ? "  x " + std::to_string(k) : "") + "\n";
        i += k;
      }
    }
  }
  out += "\n";
  print_links(out, r);
  print_memory(out, r);
  print_stages(out, r);
  const std::string& b = r.baseline;
  const double sp16 = ratio(r.baseline_fp16.total_s, r.job.total_s);
  const double sp32 = ratio(r.baseline_fp32.total_s, r.job.total_s);
  out += "total time " + duration_text(r.job.total_s) + " (" + b + " fp16 " +
         duration_text(r.baseline_fp16.total_s) + ", " + b + " fp32 " +
         duration_text(r.baseline_fp32.total_s) + ")\n";
  out += "speed-up (total time): " + ratio_text(sp16) + " vs " + b + " fp16 allreduce, " +
         ratio_text(sp32) + " vs " + b + " fp32 allreduce\n";
  out += "volume per worker " + bytes_text(r.job.total_sent_bytes) + ": " + b + " fp16 sends " +
         ratio_text(ratio(r.baseline_fp16.total_sent_bytes, r.job.total_sent_bytes)) + ", " + b +
         " fp32 " + ratio_text(ratio(r.baseline_fp32.total_sent_bytes, r.job.total_sent_bytes)) +
         " as much\n";
  if (!r.notes.empty()) {
    out += "notes:\n";
    for (const auto& n : r.notes) out += "  - " + n + "\n";
  }
  out +=
      "(an expectation from the alpha-beta model of docs/algorithms.md section 8: no jitter, no "
      "congestion, no implementation overheads)\n";
  return out;
}

Json cost_report_json(const CostReport& r) {
  const auto& t = r.topology;
  const double base = baseline_step_s(r);
  Json j = Json::object();
  j["spec"] = r.spec.resolved;
  j["topology"] = {{"name", t.name},
                   {"nodes", t.nodes},
                   {"gpus_per_node", t.gpus_per_node},
                   {"intra_latency_s", t.intra_latency_s},
                   {"intra_bytes_per_s", t.intra_bytes_per_s},
                   {"inter_latency_s", t.inter_latency_s},
                   {"inter_bytes_per_s", t.inter_bytes_per_s},
                   {"allreduce", t.allreduce},
                   {"source", t.source}};
  j["compute_s_per_step"] = r.compute_s;
  // Keys name the baseline: "adam_fp16", "vs_adam_fp16", ... for Adam.
  const std::string& b = r.baseline;
  j["optimizer"] = job_json(r.job, t, base, b);
  j["baselines"] = Json::object();
  j["speedup"] = Json::object();
  j["volume_ratio"] = Json::object();
  using Baseline = std::pair<const char*, const JobCost*>;
  for (const auto& [wire, job] :
       {Baseline{"fp16", &r.baseline_fp16}, Baseline{"fp32", &r.baseline_fp32}}) {
    const std::string key = b + "_" + wire;
    j["baselines"][key] = job_json(*job, t, base, b);
    j["speedup"]["vs_" + key] = ratio_json(ratio(job->total_s, r.job.total_s));
    j["volume_ratio"][key + "_over_this"] =
        ratio_json(ratio(job->total_sent_bytes, r.job.total_sent_bytes));
  }
  j["zero"] = ZeroOptions::schema().write(r.spec.zero);
  j["available_in_deepspeed"] = r.in_deepspeed;
  const auto memory_json = [&](const ZeroMemory& m) {
    Json out = {{"params_bytes", m.params_bytes},
                {"gradients_bytes", m.gradients_bytes},
                {"optimizer_state_bytes", m.optimizer_state_bytes},
                {"error_buffer_bytes", m.error_buffer_bytes},
                {"working_bytes", m.working_bytes},
                {"total_bytes", m.total_bytes}};
    const double cap = r.spec.settings.gpu_memory_gb * 1e9;
    if (cap > 0) out["fits"] = static_cast<double>(m.total_bytes) <= cap;
    return out;
  };
  j["memory_per_gpu"] = {{"optimizer", memory_json(r.memory)},
                         {b + "_fp16", memory_json(r.baseline_memory)}};
  if (r.spec.settings.gpu_memory_gb > 0) {
    j["memory_per_gpu"]["gpu_memory_bytes"] = r.spec.settings.gpu_memory_gb * 1e9;
  }
  j["stages"] = Json::array();
  for (const auto& row : r.stages) {
    Json s = {{"stage", row.stage}, {"available", row.available}};
    if (!row.available) {
      s["why_not"] = row.why_not;
    } else {
      s["available_in_deepspeed"] = row.in_deepspeed;
      s["total_s"] = row.total_s;
      s["memory_bytes"] = row.memory_bytes;
      s[b + "_fp16_total_s"] = row.baseline_total_s;
      s[b + "_fp16_memory_bytes"] = row.baseline_memory_bytes;
    }
    j["stages"].push_back(s);
  }
  j["limiting_links"] = Json::array();
  for (const auto& l : r.links) {
    j["limiting_links"].push_back({{"phase", l.phase},
                                   {"link", l.comm_s > 0 ? (l.inter ? "inter" : "intra") : "none"},
                                   {"text", l.comm_s > 0 ? link_text(l.inter, t) : ""},
                                   {"share", l.share}});
  }
  if (t.fitted_max_nodes > 0) {
    j["topology"]["fitted_nodes"] = {t.fitted_min_nodes, t.fitted_max_nodes};
  }
  j["overrides"] = r.spec.overrides;
  j["warnings"] = r.warnings;
  j["notes"] = r.notes;
  return j;
}

Json cost_spec_of_experiment(const Json& raw) {
  // Resolving validates the experiment; its optimizer section stays raw, so
  // that a warm-up given as a share ("15%") follows the steps being priced.
  const Experiment e = resolve_experiment(raw, "experiment");
  // The problem's shape from its options: nothing of the model's size is
  // allocated (a d = 1e9 quadratic took 78 s and 7.8 GB built).
  const ProblemShape shape = problem_shape(e.problem);
  const size_t dim = shape.dim, num_train = shape.num_train;
  const double workers = static_cast<double>(e.cluster.workers);
  const double samples = e.cluster.batch_size.full
                             ? static_cast<double>(num_train) / workers
                             : static_cast<double>(e.cluster.batch_size.samples);
  Json spec = Json::object();
  spec["description"] = "priced from experiment " + e.run.name;
  spec["params"] = static_cast<int64_t>(dim);
  spec["workers"] = e.cluster.workers;
  spec["steps"] = e.run.steps;
  spec["samples_per_worker"] = std::max(samples, 1.0);
  spec["optimizer"] = raw.at("optimizer");
  spec["compute"] = e.resolved.at("compute");
  if (e.resolved.contains("zero")) spec["zero"] = e.resolved.at("zero");
  // An experiment without a time model leaves the network to --network.
  if (e.network.timed()) spec["network"] = e.resolved.at("network");
  return spec;
}

}  // namespace bitlab
