// After the last step: the warnings about a run that went wrong without
// diverging, or whose numbers need a second look (end_of_run_warnings, called
// by run_summary.cpp's finish_run; docs/experiments.md "Honest outcomes").
// They read what the run wrote (metrics.csv) and its summary; nothing here
// changes a metric or a record.
#include <algorithm>
#include <optional>

#include "optimizers/optimizer.hpp"
#include "sim/core/human.hpp"
#include "sim/core/registry.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run_parts.hpp"
#include "sim/timing/network.hpp"

namespace bitlab::run_parts {

namespace {

// "4.29" for messages (run_parts' fmt writes every digit).
std::string diag_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// metrics.csv's train_loss column, one value per step (NaN where blank).
std::vector<double> diag_train_losses(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "metrics.csv");
  std::string line;
  if (!std::getline(in, line)) return {};
  int col = -1, k = 0;
  for (size_t start = 0;; ++k) {
    const size_t comma = line.find(',', start);
    if (line.substr(start, comma - start) == "train_loss") col = k;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<double> out;
  while (col >= 0 && std::getline(in, line)) {
    size_t start = 0;
    for (int c = 0; c < col && start != std::string::npos; ++c) {
      start = line.find(',', start);
      if (start != std::string::npos) ++start;
    }
    double v = std::numeric_limits<double>::quiet_NaN();
    if (start != std::string::npos) {
      const char* b = line.data() + start;
      std::from_chars(b, line.data() + line.size(), v);
    }
    out.push_back(v);
  }
  return out;
}

// What likely went wrong, from the optimizer's state (1-bit Adam's frozen
// variance) or else from its settings: a small eps under a frozen variance
// divides the steps of coordinates with sqrt(v) < eps by about eps (0/1 Adam
// with DeepSpeedExamples' eps 1e-8 on the Fashion-MNIST MLP: eval loss 4.29
// against Adam's 0.41; eps 1e-4 reaches 0.426).
std::string diag_cause(const RunContext& run) {
  const std::string cause = run.sim.optimizer().divergence_cause();
  if (!cause.empty()) return "likely cause: " + cause;
  const Json& o = run.experiment.optimizer;
  const bool frozen_variance = o.contains("freeze_step") || o.contains("var_freeze_step");
  if (frozen_variance && o.value("eps", 1.0) <= 1e-6) {
    return "possible cause: optimizer.eps = " + diag_num(o.value("eps", 1.0)) +
           " under a frozen variance: coordinates whose sqrt(v) lies below eps when the "
           "variance freezes have their steps divided by about eps; try eps = 1e-4 or a longer "
           "warm-up";
  }
  const double lr = o.value("lr", 0.0);
  return "possible causes: optimizer.lr = " + diag_num(lr) +
         " too large for the later steps, a warm-up too short, or the compression's error";
}

// The loss's window means (ten equal windows of metrics.csv's train_loss): a
// run whose last window rose above its best by more than half of what the
// best had gained over the first window, or, for a run that gained little,
// by more than a tenth of the first window's mean.
std::string diag_rising_loss(const RunContext& run) {
  const std::vector<double> loss = diag_train_losses(run.dir);
  const size_t w = loss.size() / 10;
  if (w < 10) return "";  // means of fewer steps follow the minibatch noise (100 steps at least)
  std::vector<double> means;
  for (size_t start = 0; start + w <= loss.size(); start += w) {
    double sum = 0;
    size_t n = 0;
    for (size_t i = start; i < start + w; ++i) {
      if (std::isfinite(loss[i])) sum += loss[i], ++n;
    }
    means.push_back(n ? sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN());
  }
  const double first = means.front(), last = means.back();
  size_t low = 0;
  for (size_t k = 0; k < means.size(); ++k) {
    if (means[k] < means[low]) low = k;
  }
  const double gained = first - means[low];
  const double allowed = 0.5 * std::max(gained, 0.2 * std::abs(first));
  if (!std::isfinite(first) || !std::isfinite(last) || low + 1 >= means.size() ||
      !(last - means[low] > allowed)) {
    return "";
  }
  const auto steps = [w](size_t k) {
    return "steps " + std::to_string(k * w + 1) + "-" + std::to_string((k + 1) * w);
  };
  const std::string path =
      low == 0 ? "rose from " + diag_num(first) + " (" + steps(0) + ") to " + diag_num(last) +
                     " (" + steps(means.size() - 1) + "), never lower than at the start"
               : "fell from " + diag_num(first) + " (" + steps(0) + ") to " +
                     diag_num(means[low]) + " (" + steps(low) + "), then rose to " +
                     diag_num(last) + " (" + steps(means.size() - 1) + ")";
  return "train_loss rose without diverging: its " + std::to_string(w) + "-step mean " + path +
         "; " +
         diag_cause(run);
}

// The run's final loss against its twin's (baseline "twin").
std::string diag_twin_gap(const RunContext& run, const Json& summary) {
  const Json& twin = summary.value("baseline", Json());
  if (!twin.is_object() || twin.value("status", "") != "completed") return "";
  for (const char* key : {"eval_loss", "train_loss"}) {
    const Json& mine = summary["final"].value(key, Json());
    const Json& theirs = twin["final"].value(key, Json());
    if (!mine.is_number() || !theirs.is_number()) continue;
    const double a = mine.get<double>(), b = theirs.get<double>();
    if (b > 0 && a > 2.0 * b) {
      return std::string("final ") + key + " " + diag_num(a) + " is " + diag_num(a / b) +
             "x its uncompressed twin's " + diag_num(b) + " (in twin/): the run went wrong "
             "without diverging; " + diag_cause(run);
    }
    return "";
  }
  return "";
}

struct TwinComm {
  double comm_s = 0, bytes = 0;
  int64_t messages = 0;
};

// The uncompressed twin's communication over `steps` steps, priced from its
// plan on the run's network (no compute: no overlap hides any of it).
std::optional<TwinComm> diag_twin_comm(const RunContext& run, int64_t steps) {
  const Twin twin = twin_optimizer(run.experiment.optimizer);
  if (twin.optimizer.is_null() || twin.optimizer == run.experiment.optimizer) return std::nullopt;
  const auto* entry = find_entry(optimizer_registry(), twin.optimizer.value("name", ""));
  if (!entry) return std::nullopt;
  const Topology& t = *run.sim.topology();
  PlanShape shape;
  shape.params = static_cast<int64_t>(run.sim.cluster().dim());
  shape.workers = run.sim.cluster().workers();
  shape.steps = steps;
  shape.gpus_per_node = t.gpus_per_node;
  shape.tensors = run.sim.cluster().tensors();
  CommPlan plan;
  try {
    plan = entry->make(twin.optimizer)->comm_plan(shape);
  } catch (const std::exception&) {
    return std::nullopt;  // a twin this shape cannot plan: nothing to compare
  }
  const std::vector<double> no_compute(static_cast<size_t>(shape.workers), 0.0);
  TwinComm out;
  for (const auto& p : plan.phases) {
    const StepTime time = price_step(p.records, t, no_compute, run.experiment.compute);
    out.comm_s += static_cast<double>(p.steps) * time.comm_s;
    for (const auto& r : p.records) {
      out.bytes += static_cast<double>(p.steps) * r.sent_bytes;
      out.messages += p.steps * r.messages;
    }
  }
  return out;
}

// A compressed run whose simulated communication is slower than its
// uncompressed twin's: latency (message counts) decides, not bytes.
std::string diag_slower_than_twin(const RunContext& run, const RunTally& tally) {
  if (!run.timed) return "";
  double comm_s = 0;
  for (const auto& [name, v] : tally.phases) comm_s += v.comm_s;
  const std::optional<TwinComm> twin = diag_twin_comm(run, tally.last.step);
  if (!twin || !(twin->comm_s > 0) || comm_s <= twin->comm_s) return "";
  const std::string name = run.experiment.optimizer.value("name", "");
  std::string twin_name = twin_optimizer(run.experiment.optimizer).optimizer.value("name", "");
  if (twin_name == name) twin_name += " with compression none";
  return "simulated communication " + human_duration(comm_s) + " exceeds the uncompressed " +
         "twin's " + human_duration(twin->comm_s) + " (" + twin_name +
         " priced on the same network, " + std::to_string(tally.last.step) + " steps) though " +
         name + " sends " + human_bytes(tally.last.bytes_sent_cum) + " per worker against " +
         human_bytes(twin->bytes) + ": latency decides, " +
         std::to_string(tally.last.messages_cum) + " messages per worker against " +
         std::to_string(twin->messages) +
         " (each pays the network's latency); fewer, larger messages (the optimizer's "
         "granularity or exchange option) or a lower-latency network change that";
}

}  // namespace

std::vector<std::string> end_of_run_warnings(const RunContext& run, const RunTally& tally,
                                             const Json& summary) {
  std::vector<std::string> out;
  if (!run.writer || tally.status != RunStatus::kCompleted) return out;
  try {
    for (std::string w : {diag_rising_loss(run), diag_twin_gap(run, summary),
                          diag_slower_than_twin(run, tally)}) {
      if (!w.empty()) out.push_back(std::move(w));
    }
  } catch (const std::exception&) {
    // A second look that cannot be taken (an unreadable metrics.csv) costs
    // the run nothing: it completed, and its summary is written without it.
  }
  return out;
}

}  // namespace bitlab::run_parts
