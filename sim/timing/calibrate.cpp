#include "sim/timing/calibrate.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

namespace bitlab {

namespace {

constexpr double kBytesPerSPerGbps = 1e9 / 8.0;

// A fitted quantity: its network field and the range it may take (in its
// field's unit). The limits are far outside any real link; a value that ends
// on one is reported as such, never hidden.
struct ParamSpec {
  const char* name;
  double lo, hi;
};
constexpr ParamSpec kSpecs[] = {
    {"intra_latency_us", 1e-3, 1e6},     {"intra_bandwidth_gbps", 1e-3, 1e7},
    {"inter_latency_us", 1e-3, 1e6},     {"inter_bandwidth_gbps", 1e-3, 1e7},
    // An efficiency lies in (0, 1] (a network file refuses any other): a
    // collective faster than its alpha-beta time ends at 1, reported as bound.
    {"allreduce_efficiency", 1e-2, 1}, {"allgather_efficiency", 1e-2, 1},
    {"reduce_scatter_efficiency", 1e-2, 1}, {"alltoall_efficiency", 1e-2, 1},
    {"intra_rendezvous_latency_us", 1e-3, 1e6}, {"inter_rendezvous_latency_us", 1e-3, 1e6},
};
// Indices into kSpecs: the four link values, the four efficiencies, then the
// two rendezvous latencies (free only where a protocol switch is fitted).
constexpr int kFirstEfficiency = 4, kFirstRendezvous = 8;
bool is_latency(int spec) { return spec == 0 || spec == 2 || spec >= kFirstRendezvous; }
// A switch's size is not fitted by Levenberg–Marquardt (the residuals are
// steps in it): it is chosen among the measured message sizes.
constexpr const char* kSwitchBytes[] = {"intra_rendezvous_bytes", "inter_rendezvous_bytes"};
constexpr double kSwitchBytesMax = 1e15;
constexpr int kParamCount = static_cast<int>(std::size(kSpecs));
constexpr size_t kMaxSwitchCandidates = 64;
// Allreduce algorithms whose rms error is within this factor of the best's
// (plus 0.1 percentage point, for a perfect fit and rounding) fit alike: the
// data do not tell them apart, and the first of ring, tree, hierarchical (as
// tried) is used, so that the same data rounded differently (a table in us, a
// CSV in ms) give the same fit. 1.25: Table 1's Ethernet rows, 7 points,
// fit a ring at 1.46 % and a tree at 1.33 %: no evidence for either.
constexpr double kTieFactor = 1.25, kTieAbsolute = 0.001;
// Where the determinability check looks at the model: a typical cluster, the
// node's NIC slower than the links inside it (so a flat ring across nodes runs
// on the NIC, as it does on every preset).
constexpr double kReference[kParamCount] = {3, 1000, 30, 10, 1, 1, 1, 1, 10, 100};

int param_index(const std::string& name) {
  for (int i = 0; i < kParamCount; ++i)
    if (name == kSpecs[i].name) return i;
  return -1;
}

std::string efficiency_name(const std::string& collective) { return collective + "_efficiency"; }

Topology topology_for(const Measurement& m, const std::map<std::string, double>& v,
                      const std::string& allreduce) {
  Topology t;
  t.name = "calibration";
  t.nodes = m.nodes;
  t.gpus_per_node = m.gpus_per_node;
  t.intra_latency_s = v.at("intra_latency_us") * 1e-6;
  t.intra_bytes_per_s = v.at("intra_bandwidth_gbps") * kBytesPerSPerGbps;
  t.inter_latency_s = v.at("inter_latency_us") * 1e-6;
  t.inter_bytes_per_s = v.at("inter_bandwidth_gbps") * kBytesPerSPerGbps;
  // A protocol switch only where `v` has one (a caller's own values may
  // leave the switch out: none).
  const auto or_zero = [&v](const char* key) {
    const auto it = v.find(key);
    return it == v.end() ? 0.0 : it->second;
  };
  t.intra_rendezvous_bytes = or_zero("intra_rendezvous_bytes");
  t.intra_rendezvous_latency_s = or_zero("intra_rendezvous_latency_us") * 1e-6;
  t.inter_rendezvous_bytes = or_zero("inter_rendezvous_bytes");
  t.inter_rendezvous_latency_s = or_zero("inter_rendezvous_latency_us") * 1e-6;
  t.allreduce = allreduce;
  t.efficiency.allreduce = v.at("allreduce_efficiency");
  t.efficiency.allgather = v.at("allgather_efficiency");
  t.efficiency.reduce_scatter = v.at("reduce_scatter_efficiency");
  t.efficiency.alltoall = v.at("alltoall_efficiency");
  return t;
}

// The record collective_time_s prices for a measurement.
CommRecord record_for(const Measurement& m, const std::string& allreduce) {
  CommRecord r;
  r.op = m.collective == "allreduce"        ? "allreduce"
         : m.collective == "allgather"      ? "allgather"
         : m.collective == "reduce_scatter" ? "reduce_scatter"
                                            : "alltoall";
  r.algorithm = allreduce == "tree" ? "tree" : "ring";
  r.dtype = "fp32";
  r.scope = "all";
  r.ranks = m.nodes * m.gpus_per_node;
  r.payload_bytes = static_cast<int64_t>(m.bytes);
  return r;
}

// One fitting problem: which points, which parameters are free, the values of
// the others, and the allreduce algorithm.
struct FitProblem {
  const std::vector<Measurement>* points = nullptr;
  std::vector<size_t> use;
  std::vector<int> free;  // indices into kSpecs
  std::map<std::string, double> base;
  std::string allreduce;

  std::map<std::string, double> values(const Eigen::VectorXd& log_x) const {
    auto v = base;
    for (size_t k = 0; k < free.size(); ++k) v[kSpecs[free[k]].name] = std::exp(log_x[k]);
    return v;
  }
  Eigen::VectorXd residuals(const Eigen::VectorXd& log_x) const {
    // One topology for every point (only its node shape differs): building
    // it per point from the value map was most of a large fit's time.
    Topology t = topology_for(Measurement{}, values(log_x), allreduce);
    Eigen::VectorXd r(use.size());
    for (size_t i = 0; i < use.size(); ++i) {
      const Measurement& m = (*points)[use[i]];
      t.nodes = m.nodes;
      t.gpus_per_node = m.gpus_per_node;
      r[i] = collective_time_s(record_for(m, allreduce), t) / m.time_s - 1.0;
    }
    return r;
  }
  Eigen::MatrixXd jacobian(const Eigen::VectorXd& log_x) const {
    // Central differences in log space: the model is piecewise smooth
    // (min/max of links), and h = 1e-5 keeps the truncation error near 1e-10.
    constexpr double h = 1e-5;
    Eigen::MatrixXd j(use.size(), free.size());
    for (size_t k = 0; k < free.size(); ++k) {
      Eigen::VectorXd up = log_x, down = log_x;
      up[k] += h;
      down[k] -= h;
      j.col(k) = (residuals(up) - residuals(down)) / (2 * h);
    }
    return j;
  }
  void clamp(Eigen::VectorXd& log_x) const {
    for (size_t k = 0; k < free.size(); ++k) {
      log_x[k] = std::clamp(log_x[k], std::log(kSpecs[free[k]].lo), std::log(kSpecs[free[k]].hi));
    }
  }
};

// Levenberg–Marquardt from one start; returns the final log parameters.
Eigen::VectorXd levenberg_marquardt(const FitProblem& p, Eigen::VectorXd x) {
  p.clamp(x);
  Eigen::VectorXd r = p.residuals(x);
  double cost = r.squaredNorm();
  double lambda = 1e-3;
  for (int iter = 0; iter < 200 && cost > 0; ++iter) {
    const Eigen::MatrixXd j = p.jacobian(x);
    const Eigen::MatrixXd a = j.transpose() * j;
    const Eigen::VectorXd g = j.transpose() * r;
    bool improved = false;
    while (lambda < 1e12) {
      Eigen::MatrixXd damped = a;
      for (int k = 0; k < damped.rows(); ++k) damped(k, k) += lambda * (a(k, k) + 1e-12);
      Eigen::VectorXd next = x - damped.ldlt().solve(g);
      p.clamp(next);
      const Eigen::VectorXd r_next = p.residuals(next);
      const double c = r_next.squaredNorm();
      if (std::isfinite(c) && c < cost) {
        const double gain = (cost - c) / cost;
        x = next;
        r = r_next;
        cost = c;
        lambda = std::max(lambda / 3, 1e-12);
        improved = gain > 1e-13;
        break;
      }
      lambda *= 4;
    }
    if (!improved) break;
  }
  return x;
}

// The best of several starts (each latency at 1 and 30 µs, each bandwidth at
// 10 and 1000 Gbit/s, efficiencies at 1): the model has kinks (a flat ring
// runs on the slower link), so one start can end in the wrong branch.
Eigen::VectorXd fit_from_starts(const FitProblem& p) {
  const size_t n = p.free.size();
  std::vector<int> two_way;
  for (size_t k = 0; k < n; ++k)
    if (p.free[k] < kFirstEfficiency || p.free[k] >= kFirstRendezvous)
      two_way.push_back(static_cast<int>(k));
  Eigen::VectorXd best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int mask = 0; mask < (1 << two_way.size()); ++mask) {
    Eigen::VectorXd start(n);
    for (size_t k = 0; k < n; ++k) start[k] = 0.0;  // efficiencies: log 1
    for (size_t b = 0; b < two_way.size(); ++b) {
      const int k = two_way[b];
      const bool latency = is_latency(p.free[k]);
      const bool high = (mask >> b) & 1;
      start[k] = std::log(latency ? (high ? 30.0 : 1.0) : (high ? 1000.0 : 10.0));
    }
    const Eigen::VectorXd x = levenberg_marquardt(p, start);
    const double c = p.residuals(x).squaredNorm();
    if (c < best_cost) {
      best_cost = c;
      best = x;
    }
  }
  return best;
}

// Throws ConfigError unless every free parameter is determined by the points:
// some point's time must depend on it, and no combination of the free
// parameters may leave every point's time unchanged (the columns of the
// Jacobian at the reference cluster, normalised, must be independent).
std::string undetermined(const FitProblem& p) {
  Eigen::VectorXd ref(p.free.size());
  for (size_t k = 0; k < p.free.size(); ++k) ref[k] = std::log(kReference[p.free[k]]);
  const Eigen::MatrixXd j = p.jacobian(ref);
  // Parameters no point depends on, and the normalised columns of the others.
  std::vector<size_t> touched;
  std::string untouched;
  for (size_t k = 0; k < p.free.size(); ++k) {
    if (j.col(k).norm() >= 1e-9) {
      touched.push_back(k);
    } else if (untouched.empty()) {
      const std::string name = kSpecs[p.free[k]].name;
      const bool intra = name.rfind("intra", 0) == 0;
      untouched = "cannot determine " + name + ": no measurement depends on it (" +
                  (intra ? "none runs between devices of one node under the " + p.allreduce +
                               " allreduce model: measure inside one node"
                         : "none spans nodes: measure across nodes") +
                  ", or give --fix " + name + "=VALUE)";
    }
  }
  if (touched.size() > p.use.size()) {
    return "cannot determine " + std::to_string(touched.size()) + " parameters from " +
           std::to_string(p.use.size()) +
           " measurements: measure more points or --fix some of them";
  }
  Eigen::MatrixXd normalised(j.rows(), static_cast<Eigen::Index>(touched.size()));
  for (size_t i = 0; i < touched.size(); ++i)
    normalised.col(static_cast<Eigen::Index>(i)) = j.col(touched[i]) / j.col(touched[i]).norm();
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(normalised, Eigen::ComputeThinV);
  const auto& s = svd.singularValues();
  if (s.size() > 0 && s[s.size() - 1] < 1e-6 * s[0]) {
    const Eigen::VectorXd v = svd.matrixV().col(s.size() - 1);
    std::vector<std::string> names;
    for (size_t i = 0; i < touched.size(); ++i)
      if (std::abs(v[static_cast<Eigen::Index>(i)]) > 0.2) names.push_back(kSpecs[p.free[touched[i]]].name);
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : " and ") + n;
    return "cannot tell " + joined +
           " apart: the measurements change them only together (for example, "
           "every point at one level has the same message size and rank count); measure more "
           "message sizes or give --fix " + names.front() + "=VALUE";
  }
  return untouched;
}

struct FitOutcome {
  std::map<std::string, double> values;
  double rms = 0;
};

// The fit at `x`: its values and the rms of its relative residuals.
FitOutcome outcome_at(const FitProblem& p, const Eigen::VectorXd& x) {
  const Eigen::VectorXd r = p.residuals(x);
  return {p.values(x), std::sqrt(r.squaredNorm() / static_cast<double>(r.size()))};
}

FitOutcome solve(const FitProblem& p) { return outcome_at(p, fit_from_starts(p)); }

// Levenberg–Marquardt from the fit without the switch (`from`), its
// rendezvous latency started at the eager one and at 10 times it: the best.
FitOutcome solve_from(const FitProblem& p, const std::map<std::string, double>& from) {
  FitOutcome out;
  out.rms = std::numeric_limits<double>::infinity();
  for (const double times : {1.0, 10.0}) {
    Eigen::VectorXd start(p.free.size());
    for (size_t k = 0; k < p.free.size(); ++k) {
      const int i = p.free[k];
      const double eager = from.at(kSpecs[i == kFirstRendezvous ? 0 : 2].name);
      start[k] = std::log(i >= kFirstRendezvous ? eager * times : from.at(kSpecs[i].name));
    }
    const FitOutcome f = outcome_at(p, levenberg_marquardt(p, start));
    if (f.rms < out.rms) out = f;
  }
  return out;
}

double rms_of(const std::vector<Measurement>& pts, const std::vector<size_t>& idx,
              const std::map<std::string, double>& v, const std::string& algo) {
  if (idx.empty()) return 0.0;
  double s = 0;
  for (size_t i : idx) {
    const double r = predicted_time_s(pts[i], v, algo) / pts[i].time_s - 1.0;
    s += r * r;
  }
  return std::sqrt(s / static_cast<double>(idx.size()));
}

// " (measurements from a.txt, probe.json)": the files the points came from
// (each origin is "FILE:LINE" or "FILE: results[i]"), for messages; "" when
// none says.
std::string sources_of(const std::vector<Measurement>& pts) {
  std::vector<std::string> files;
  for (const auto& m : pts) {
    const auto colon = m.origin.rfind(':');
    if (colon == std::string::npos || colon == 0) continue;
    const std::string f = m.origin.substr(0, colon);
    if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  }
  std::string s;
  for (const auto& f : files) s += (s.empty() ? " (measurements from " : ", ") + f;
  return s.empty() ? s : s + ")";
}

void check_points(const std::vector<Measurement>& pts) {
  if (pts.empty()) config_fail("measurements", Json::array(), "none were read: nothing to fit");
  static const std::set<std::string> kKnown = {"allreduce", "allgather", "reduce_scatter",
                                               "alltoall"};
  for (const auto& m : pts) {
    const std::string where = m.origin.empty() ? "measurement" : m.origin;
    if (!kKnown.count(m.collective))
      config_fail(where + ": collective", Json(m.collective),
                  "must be allreduce, allgather, reduce_scatter or alltoall");
    if (m.nodes < 1 || m.gpus_per_node < 1)
      config_fail(where + ": nodes x gpus_per_node",
                  Json(std::to_string(m.nodes) + " x " + std::to_string(m.gpus_per_node)),
                  "must both be >= 1");
    if (m.nodes * m.gpus_per_node < 2)
      config_fail(where + ": ranks", Json(m.nodes * m.gpus_per_node),
                  "a collective on one rank moves nothing: at least 2 ranks");
    if (!(m.bytes > 0) || !std::isfinite(m.bytes))
      config_fail(where + ": bytes", Json(m.bytes), "must be > 0");
    if (!(m.time_s > 0) || !std::isfinite(m.time_s))
      config_fail(where + ": time", Json(m.time_s), "must be > 0");
  }
}

}  // namespace

double predicted_time_s(const Measurement& m, const std::map<std::string, double>& values,
                        const std::string& allreduce) {
  return collective_time_s(record_for(m, allreduce), topology_for(m, values, allreduce));
}

namespace {

// The problem for one algorithm: free = link parameters not fixed, plus the
// efficiencies in `efficiencies`, plus the rendezvous latency of each level
// whose switch size (fixed, or `switches`: level index -> bytes) is > 0.
FitProblem make_problem(const std::vector<Measurement>& pts, const CalibrationOptions& o,
                        const std::string& algo, const std::set<std::string>& efficiencies,
                        const std::map<int, double>& switches = {}) {
  FitProblem p;
  p.points = &pts;
  for (size_t i = 0; i < pts.size(); ++i) p.use.push_back(i);
  p.allreduce = algo;
  for (int i = 0; i < kParamCount; ++i) p.base[kSpecs[i].name] = kReference[i];
  for (int i = kFirstEfficiency; i < kFirstRendezvous; ++i) p.base[kSpecs[i].name] = 1.0;
  for (int level = 0; level < 2; ++level) {
    const auto chosen = switches.find(level);
    p.base[kSwitchBytes[level]] = chosen == switches.end() ? 0.0 : chosen->second;
  }
  for (const auto& [name, value] : o.fixed) p.base[name] = value;
  for (int i = 0; i < kFirstEfficiency; ++i)
    if (!o.fixed.count(kSpecs[i].name)) p.free.push_back(i);
  for (const auto& e : efficiencies)
    if (!o.fixed.count(e)) p.free.push_back(param_index(e));
  for (int level = 0; level < 2; ++level) {
    const int latency = kFirstRendezvous + level;
    if (p.base[kSwitchBytes[level]] > 0 && !o.fixed.count(kSpecs[latency].name))
      p.free.push_back(latency);
  }
  return p;
}

bool is_switch_bytes(const std::string& name) {
  return name == kSwitchBytes[0] || name == kSwitchBytes[1];
}

void check_options(const CalibrationOptions& o) {
  for (const auto& [name, value] : o.fixed) {
    if (is_switch_bytes(name)) {
      if (!(value >= 0 && value <= kSwitchBytesMax))
        config_fail("--fix " + name, Json(value),
                    "must lie in [0, 1e15] (0: no protocol switch at that level)");
      continue;
    }
    const int i = param_index(name);
    if (i < 0) {
      std::vector<std::string> names;
      for (const auto& s : kSpecs) names.push_back(s.name);
      for (const char* b : kSwitchBytes) names.push_back(b);
      config_fail("--fix " + name, Json(value), one_of_message(name, names));
    }
    if (!(value >= kSpecs[i].lo && value <= kSpecs[i].hi))
      config_fail("--fix " + name, Json(value),
                  "must lie in [" + show_value(Json(kSpecs[i].lo)) + ", " +
                      show_value(Json(kSpecs[i].hi)) + "]");
  }
  if (o.algorithms.empty()) config_fail("--allreduce", Json::array(), "give at least one algorithm");
  for (const auto& a : o.algorithms) {
    if (a != "ring" && a != "tree" && a != "hierarchical")
      config_fail("--allreduce", Json(a), one_of_message(a, {"ring", "tree", "hierarchical"}));
  }
}

// Which collectives get an efficiency: those (other than the reference, the
// first present of allreduce, allgather, reduce_scatter, alltoall) whose RMS
// error it lowers by at least o.efficiency_gain.
std::set<std::string> useful_efficiencies(const std::vector<Measurement>& pts,
                                          const CalibrationOptions& o, const std::string& algo,
                                          const FitOutcome& without) {
  std::map<std::string, std::vector<size_t>> by;
  for (size_t i = 0; i < pts.size(); ++i) by[pts[i].collective].push_back(i);
  std::string reference;
  for (const char* c : {"allreduce", "allgather", "reduce_scatter", "alltoall"})
    if (by.count(c) && reference.empty()) reference = c;
  std::set<std::string> candidates;
  for (const auto& [c, idx] : by)
    if (c != reference) candidates.insert(efficiency_name(c));
  if (candidates.empty()) return {};
  const FitProblem with_p = make_problem(pts, o, algo, candidates);
  if (!undetermined(with_p).empty()) return {};
  const FitOutcome with = solve(with_p);
  std::set<std::string> keep;
  for (const auto& [c, idx] : by) {
    if (c == reference) continue;
    const double gain = rms_of(pts, idx, without.values, algo) - rms_of(pts, idx, with.values, algo);
    if (gain >= o.efficiency_gain) keep.insert(efficiency_name(c));
  }
  return keep;
}

// Leave-one-out without n refits: at the full fit's solution, the residual
// of point i fitted without it is, to first order (one Gauss-Newton step from
// that solution; exact for a model linear in its parameters), r_i / (1 - h_i)
// with h_i = j_i' (J'J)^-1 j_i its leverage (Cook and Weisberg, "Residuals and
// Influence in Regression", 1982, ch. 2). h_i near 1: the other points cannot
// determine the fit without it (n/a, as a refit's undetermined()). O(n k^2)
// against the refits' O(n^2 k iterations).
void leave_one_out_by_leverage(const FitProblem& full, const Eigen::VectorXd& x, Calibration& c) {
  const Eigen::MatrixXd j = full.jacobian(x);
  const Eigen::VectorXd r = full.residuals(x);
  const Eigen::MatrixXd a = j.transpose() * j;
  const Eigen::LDLT<Eigen::MatrixXd> ldlt(a);
  for (size_t i = 0; i < full.use.size(); ++i) {
    const Eigen::VectorXd ji = j.row(static_cast<Eigen::Index>(i)).transpose();
    const double h = ji.dot(ldlt.solve(ji));
    double loo = std::numeric_limits<double>::quiet_NaN();
    if (std::isfinite(h) && 1 - h > 1e-6) {
      loo = r[static_cast<Eigen::Index>(i)] / (1 - h);
      c.loo_max_abs_residual = std::max(c.loo_max_abs_residual, std::abs(loo));
    }
    c.points[full.use[i]].loo_residual = loo;
  }
}

void leave_one_out(const std::vector<Measurement>& pts, const FitProblem& full, size_t exact_points,
                   Calibration& c) {
  c.loo_max_abs_residual = 0;
  Eigen::VectorXd start(full.free.size());
  for (size_t k = 0; k < full.free.size(); ++k) start[k] = std::log(c.values.at(kSpecs[full.free[k]].name));
  if (pts.size() > exact_points) {
    c.loo_method = "leverage";
    leave_one_out_by_leverage(full, start, c);
    return;
  }
  for (size_t i = 0; i < pts.size(); ++i) {
    FitProblem p = full;
    p.use.erase(std::remove(p.use.begin(), p.use.end(), i), p.use.end());
    double loo = std::numeric_limits<double>::quiet_NaN();
    if (!p.use.empty() && undetermined(p).empty()) {
      // One start, from the full fit: dropping a point moves the optimum a
      // little (16 starts per point made this the fit's slowest part).
      const Eigen::VectorXd x = levenberg_marquardt(p, start);
      loo = predicted_time_s(pts[i], p.values(x), full.allreduce) / pts[i].time_s - 1.0;
      c.loo_max_abs_residual = std::max(c.loo_max_abs_residual, std::abs(loo));
    }
    c.points[i].loo_residual = loo;
  }
}

// The protocol switch of each level, where the data call for one: each
// message size measured at that level (a collective's bytes per rank, the
// largest excepted) is tried as the switch's size, the rendezvous latency
// fitted with everything else; the best is kept when it lowers the rms error
// by o.efficiency_gain, as an efficiency is. A size given with --fix is used
// as given (0: none).
void choose_switches(const std::vector<Measurement>& pts, const CalibrationOptions& o,
                     FitProblem& best_problem, FitOutcome& best, std::vector<std::string>& notes) {
  std::set<std::string> effs;
  for (int i : best_problem.free)
    if (i >= kFirstEfficiency && i < kFirstRendezvous) effs.insert(kSpecs[i].name);
  std::map<int, double> chosen;
  for (int level = 0; level < 2; ++level) {
    // A fit already within the gain cannot gain it (and the search is the
    // slow part of a fit): no switch.
    if (o.fixed.count(kSwitchBytes[level]) || best.rms < o.efficiency_gain) continue;
    std::set<double> sizes;
    for (const auto& m : pts)
      if ((level == 0) == (m.nodes == 1)) sizes.insert(m.bytes / (m.nodes * m.gpus_per_node));
    if (sizes.size() < 3) continue;  // a step needs sizes on both sides and a slope
    sizes.erase(std::prev(sizes.end()));
    // Past kMaxSwitchCandidates sizes, an even spread of them (each try is a
    // fit: a thousand sizes would be a thousand fits).
    if (sizes.size() > kMaxSwitchCandidates) {
      const std::vector<double> all(sizes.begin(), sizes.end());
      sizes.clear();
      for (size_t k = 0; k < kMaxSwitchCandidates; ++k)
        sizes.insert(all[k * (all.size() - 1) / (kMaxSwitchCandidates - 1)]);
    }
    FitOutcome level_best = best;
    FitProblem level_problem = best_problem;
    double size = 0;
    for (double candidate : sizes) {
      auto with = chosen;
      with[level] = candidate;
      const FitProblem p = make_problem(pts, o, best_problem.allreduce, effs, with);
      if (!undetermined(p).empty()) continue;
      const FitOutcome f = solve_from(p, best.values);
      if (f.rms < level_best.rms) {
        level_best = f;
        level_problem = p;
        size = candidate;
      }
    }
    if (size > 0 && best.rms - level_best.rms >= o.efficiency_gain) {
      char text[160];
      std::snprintf(text, sizeof text,
                    "a protocol switch above %.0f B a message (%s) lowers the rms error from "
                    "%.1f %% to %.1f %%",
                    size, level == 0 ? "inside a node" : "across nodes", 100 * best.rms,
                    100 * level_best.rms);
      notes.push_back(text);
      chosen[level] = size;
      best = level_best;
      best_problem = level_problem;
    }
  }
}

}  // namespace

void MeasurementSet::add(const Measurement& m) {
  rows_ += m.repeats;
  const double lo = m.min_time_s > 0 ? m.min_time_s : m.time_s;
  const double hi = m.max_time_s > 0 ? m.max_time_s : m.time_s;
  const auto key = std::make_tuple(m.collective, m.nodes, m.gpus_per_node, m.bytes);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    if (points_.size() >= kMaxCalibrationPoints)
      throw ConfigError(m.origin + ": more than " + std::to_string(kMaxCalibrationPoints) +
                            " distinct measurements (collective, nodes, ranks per node, size): "
                            "the fit's time grows with their number, so at most " +
                            std::to_string(kMaxCalibrationPoints) +
                            " (nccl-tests -f 2 from 8 B to 256 MB is 26 sizes; repeats of a "
                            "point do not count)",
                        "measurements");
    index_.emplace(key, points_.size());
    points_.push_back(m);
    points_.back().min_time_s = lo;
    points_.back().max_time_s = hi;
    return;
  }
  Measurement& p = points_[it->second];
  const double total_s = p.time_s * static_cast<double>(p.repeats) + m.time_s * static_cast<double>(m.repeats);
  p.repeats += m.repeats;
  p.time_s = total_s / static_cast<double>(p.repeats);
  p.min_time_s = std::min(p.min_time_s, lo);
  p.max_time_s = std::max(p.max_time_s, hi);
}

namespace {

// Repeats merged (MeasurementSet), and a note saying so.
std::vector<Measurement> merged(const std::vector<Measurement>& in, std::vector<std::string>& notes) {
  MeasurementSet set;
  for (const auto& m : in) set.add(m);
  const auto& pts = set.points();
  size_t repeated = 0;
  int64_t repeat_rows = 0;
  double widest = 0;
  std::string where;
  for (const auto& m : pts) {
    if (m.repeats < 2) continue;
    ++repeated;
    repeat_rows += m.repeats;
    const double spread = m.max_time_s / m.min_time_s - 1;
    if (spread >= widest) {
      widest = spread;
      where = m.origin;
    }
  }
  if (repeated > 0) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "%lld rows measure %zu point(s) more than once (%lld rows, %zu points in all; "
                  "the widest spread, %.0f %% from fastest to slowest, at ",
                  static_cast<long long>(repeat_rows), repeated, static_cast<long long>(set.rows()),
                  pts.size(), 100 * widest);
    notes.push_back(std::string(text) + where +
                    "): each point is fitted once, at the mean of its rows' times (the same "
                    "collective, nodes, ranks per node and size)");
  }
  return pts;
}

// The link fields of a level (0: inside a node, 1: across nodes).
const char* const kLevelFields[2][2] = {{"intra_latency_us", "intra_bandwidth_gbps"},
                                        {"inter_latency_us", "inter_bandwidth_gbps"}};

// Whether some measurement runs on the level alone (inside a node: one node
// of several ranks) or spans it (across nodes).
bool covers_level(const std::vector<Measurement>& pts, int level) {
  for (const auto& m : pts)
    if (level == 0 ? m.nodes == 1 && m.gpus_per_node > 1 : m.nodes > 1) return true;
  return false;
}

// `o` with the levels no measurement covers taken from o.level_from (held
// like --fix; `taken` names them), where it is given.
CalibrationOptions with_levels_from(const std::vector<Measurement>& pts, const CalibrationOptions& o,
                                    std::vector<std::string>& taken, std::vector<std::string>& notes) {
  CalibrationOptions out = o;
  if (o.level_from.empty()) return out;
  for (int level = 0; level < 2; ++level) {
    if (covers_level(pts, level)) continue;
    std::string text;
    for (const char* f : kLevelFields[level]) {
      if (o.fixed.count(f)) continue;
      out.fixed[f] = o.level_from.at(f);
      taken.push_back(f);
      text += (text.empty() ? "" : " and ") + std::string(f) + " = " + show_value(Json(o.level_from.at(f)));
    }
    if (!text.empty())
      notes.push_back(text + " taken from preset " + o.level_from_name + ": no measurement " +
                      (level == 0 ? "runs inside one node (nodes = 1)" : "spans nodes") +
                      ", so the data cannot determine that level");
  }
  if (taken.empty())
    notes.push_back("--level-from " + o.level_from_name + ": not used (the measurements cover "
                    "both levels)");
  return out;
}

struct AlgorithmFit {
  std::string algorithm;
  FitProblem problem;
  FitOutcome outcome;
};

std::string ms_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g ms", 1e3 * s);
  return b;
}

// The note for algorithms that fit alike: their prices at the scale the user
// will price (o.price_nodes, else 4x and 16x the largest node count
// measured), and the node count whose measurement would separate them.
std::string tie_note(const std::vector<AlgorithmFit>& tied, const std::vector<Measurement>& pts,
                     const CalibrationOptions& o, int gpus_per_node) {
  double bytes = 0;
  int max_nodes = 1;
  std::set<int> measured;
  for (const auto& m : pts) {
    if (m.collective == "allreduce") {
      bytes = std::max(bytes, m.bytes);
      measured.insert(m.nodes);
    }
    max_nodes = std::max(max_nodes, m.nodes);
  }
  if (bytes == 0) for (const auto& m : pts) bytes = std::max(bytes, m.bytes);
  const auto spread_at = [&](int nodes, std::vector<double>* times) {
    double lo = std::numeric_limits<double>::infinity(), hi = 0;
    for (const auto& f : tied) {
      const double t = predicted_time_s({"allreduce", nodes, gpus_per_node, bytes, 0, ""},
                                        f.outcome.values, f.algorithm);
      lo = std::min(lo, t);
      hi = std::max(hi, t);
      if (times) times->push_back(t);
    }
    return hi / lo - 1;
  };
  std::string names, rms;
  for (const auto& f : tied) {
    names += (names.empty() ? "" : ", ") + f.algorithm;
    char b[32];
    std::snprintf(b, sizeof b, "%.2f %%", 100 * f.outcome.rms);
    rms += (rms.empty() ? "" : ", ") + std::string(b);
  }
  char bytes_text[32];
  std::snprintf(bytes_text, sizeof bytes_text, "%.4g", bytes);
  std::string s = "allreduce " + names + " fit alike (rms " + rms + "): the measurements do not "
                  "tell them apart, and " + tied.front().algorithm +
                  " is used (the first of them; --allreduce picks another). Priced for a " +
                  bytes_text + " B allreduce:";
  std::vector<int> scale = o.price_nodes;
  if (scale.empty()) scale = {4 * max_nodes, 16 * max_nodes};
  for (int nodes : scale) {
    std::vector<double> t;
    const double spread = spread_at(nodes, &t);
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict, its bug
    // 105329) on "literal" + std::string chains here.
    char head[64];
    std::snprintf(head, sizeof head, " at %d nodes x %d,", nodes, gpus_per_node);
    s.append(head);
    for (size_t k = 0; k < tied.size(); ++k) {
      s.append(" ").append(ms_text(t[k])).append(" (").append(tied[k].algorithm).append(")");
    }
    char tail[48];
    std::snprintf(tail, sizeof tail, ": %.0f %% apart;", 100 * spread);
    s.append(tail);
  }
  // The smallest node count not yet measured where they differ by 10 %.
  int best_nodes = 0;
  double best_spread = 0;
  for (int nodes = 2; nodes <= std::max(64, 2 * max_nodes); ++nodes) {
    if (measured.count(nodes)) continue;
    const double spread = spread_at(nodes, nullptr);
    if (spread > best_spread * 1.0001) {
      best_spread = spread;
      best_nodes = nodes;
    }
    if (spread >= 0.10) break;
  }
  if (best_nodes > 0 && best_spread > 0.01)
    s += " to tell them apart, measure allreduce across " + std::to_string(best_nodes) +
         " nodes (there they differ by " + std::to_string(static_cast<int>(std::lround(100 * best_spread))) + " %)";
  else
    s += " they price alike at every node count up to 64, so the choice hardly matters";
  return s;
}

}  // namespace

Calibration calibrate(const std::vector<Measurement>& input, const CalibrationOptions& given) {
  check_points(input);
  check_options(given);
  Calibration c;
  const std::vector<Measurement> pts = merged(input, c.notes);
  std::vector<std::string> from_preset;
  const CalibrationOptions o = with_levels_from(pts, given, from_preset, c.notes);
  // The network file's gpus_per_node: the multi-node measurements' (all the
  // same), else the largest single node measured.
  const Measurement* multi = nullptr;
  for (const auto& m : pts) {
    if (m.nodes == 1) {
      c.gpus_per_node = std::max(c.gpus_per_node, m.gpus_per_node);
    } else if (!multi) {
      multi = &m;
    } else if (m.gpus_per_node != multi->gpus_per_node) {
      config_fail(m.origin + ": gpus_per_node", Json(m.gpus_per_node),
                  "must be the same for every multi-node measurement (" +
                      std::to_string(multi->gpus_per_node) + " at " + multi->origin + ")");
    }
  }
  if (multi) c.gpus_per_node = multi->gpus_per_node;
  // Fit each algorithm; keep the best one that the data determine.
  std::string first_error;
  std::vector<AlgorithmFit> fits;
  for (const auto& algo : o.algorithms) {
    const FitProblem p0 = make_problem(pts, o, algo, {});
    const std::string why = undetermined(p0);
    if (!why.empty()) {
      if (first_error.empty()) first_error = why;
      c.notes.push_back("allreduce " + algo + ": not fitted (" + why + ")");
      continue;
    }
    const FitOutcome without = solve(p0);
    const auto effs = useful_efficiencies(pts, o, algo, without);
    const FitProblem p = make_problem(pts, o, algo, effs);
    const FitOutcome f = effs.empty() ? without : solve(p);
    c.tried.push_back({algo, f.rms});
    fits.push_back({algo, p, f});
  }
  if (fits.empty()) {
    std::string hint;
    if (given.level_from.empty() && (!covers_level(pts, 0) || !covers_level(pts, 1)))
      hint = "; or --level-from PRESET to take the level no measurement covers (" +
             std::string(!covers_level(pts, 0) ? "inside a node" : "across nodes") +
             ") from a preset network";
    throw ConfigError("calibrate" + sources_of(pts) + ": " + first_error + hint, "--fix");
  }
  // The best fit, then every fit alike (kTieFactor): the first of those is used.
  double best_rms = std::numeric_limits<double>::infinity();
  for (const auto& f : fits) best_rms = std::min(best_rms, f.outcome.rms);
  std::vector<AlgorithmFit> tied;
  for (const auto& f : fits)
    if (f.outcome.rms <= best_rms * kTieFactor + kTieAbsolute) tied.push_back(f);
  FitOutcome best = tied.front().outcome;
  FitProblem best_problem = tied.front().problem;
  if (tied.size() > 1) {
    for (const auto& f : tied) c.tied.push_back(f.algorithm);
    c.notes.push_back(tie_note(tied, pts, o, c.gpus_per_node));
  }
  choose_switches(pts, o, best_problem, best, c.notes);
  c.values = best.values;
  for (const char* b : kSwitchBytes)
    c.how[b] = o.fixed.count(b) ? "fixed" : c.values.at(b) > 0 ? "fitted" : "none";
  c.allreduce = best_problem.allreduce;
  for (int i = 0; i < kParamCount; ++i) {
    const std::string name = kSpecs[i].name;
    const bool free = std::find(best_problem.free.begin(), best_problem.free.end(), i) !=
                      best_problem.free.end();
    const double v = c.values[name];
    const bool preset = std::find(from_preset.begin(), from_preset.end(), name) != from_preset.end();
    c.how[name] = preset ? "preset" : o.fixed.count(name) ? "fixed" : !free ? "default" : "fitted";
    if (free && (v <= kSpecs[i].lo * 1.0001 || v >= kSpecs[i].hi * 0.9999)) {
      c.how[name] = "bound";
      c.notes.push_back(i >= kFirstEfficiency && i < kFirstRendezvous && v >= kSpecs[i].hi * 0.9999
                            ? name + " ended at its limit 1: this collective runs at least as fast "
                                     "as the model's alpha-beta time (an efficiency is at most 1)"
                            : name + " ended at its limit " + show_value(Json(v)) +
                                  ": the data show no effect of it at this level (treat it as negligible)");
    }
  }
  double sum_sq = 0;
  for (const auto& m : pts) {
    PointFit pf;
    pf.measured = m;
    pf.predicted_s = predicted_time_s(m, c.values, c.allreduce);
    pf.residual = pf.predicted_s / m.time_s - 1.0;
    sum_sq += pf.residual * pf.residual;
    c.max_abs_residual = std::max(c.max_abs_residual, std::abs(pf.residual));
    c.points.push_back(pf);
  }
  c.rms_residual = std::sqrt(sum_sq / static_cast<double>(pts.size()));
  leave_one_out(pts, best_problem, o.exact_loo_points, c);
  return c;
}

}  // namespace bitlab
