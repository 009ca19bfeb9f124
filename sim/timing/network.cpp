#include "sim/timing/network.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "sim/core/rng.hpp"
#include "sim/timing/network_file.hpp"

namespace bitlab {

namespace {
constexpr double kGbpsToBytesPerS = 1e9 / 8.0;
int ceil_log2(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}
}  // namespace

const std::vector<NetworkPreset>& network_presets() {
  // Bandwidths are what a collective can use, not line rates, where a
  // measurement exists; otherwise the line rate with the assumption stated.
  static const std::vector<NetworkPreset> kPresets = {
      {"ethernet_40g_v100x4", 4, 5.0, 96.0, 30.0, 4.1,
       "1-bit Adam (Tang et al. 2021) Ethernet cluster: 4 V100 per node on PCIe, 40 Gb "
       "Ethernet whose measured throughput was about 4.1 Gbps. PCIe 3.0 x16 ~12 GB/s "
       "achievable (96 Gbps); latencies assumed: 5 us PCIe, 30 us TCP."},
      {"infiniband_qdr_v100x8", 8, 3.0, 1040.0, 5.0, 32.0,
       "1-bit Adam (Tang et al. 2021) InfiniBand cluster: 8 V100 per node on NVLink, 40 Gb "
       "InfiniBand QDR measured at about 32 Gbps. Intra-node: ~130 GB/s NCCL ring bandwidth "
       "on a DGX-1V (assumed); latencies assumed: 3 us NVLink, 5 us InfiniBand."},
      {"ethernet_10g_a100x8", 8, 3.0, 1840.0, 30.0, 9.4,
       "8 A100 per node on NVLink 3 (~230 GB/s NCCL ring bandwidth, assumed), one 10 Gb "
       "Ethernet NIC per node at ~94 % TCP efficiency (assumed) - the BinSGDM paper's setting"},
      {"ethernet_25g_a100x8", 8, 3.0, 1840.0, 25.0, 23.5,
       "8 A100 per node on NVLink 3, one 25 Gb Ethernet NIC per node at ~94 % (assumed)"},
      {"ethernet_100g_a100x8", 8, 3.0, 1840.0, 15.0, 94.0,
       "8 A100 per node on NVLink 3, one 100 Gb Ethernet NIC per node at ~94 % (assumed)"},
      {"infiniband_hdr_a100x8", 8, 3.0, 1840.0, 4.0, 1600.0,
       "DGX A100: 8 A100 on NVLink 3, 8 x 200 Gb HDR InfiniBand NICs per node (line rate)"},
      {"infiniband_ndr_h100x8", 8, 3.0, 3600.0, 4.0, 3200.0,
       "DGX H100: 8 H100 on NVLink 4 (~450 GB/s NCCL ring bandwidth, assumed), 8 x 400 Gb NDR "
       "InfiniBand NICs per node (line rate)"},
  };
  return kPresets;
}

Schema<NetworkOptions> NetworkOptions::schema() {
  using O = NetworkOptions;
  std::vector<std::string> names = {"none", "custom"};
  for (const auto& p : network_presets()) names.push_back(p.name);
  Schema<O> s;
  s.field("preset", &O::preset,
          "cluster network: a preset (see `bitlab list`), \"custom\" (give every link value), "
          "or \"none\" (no time model)",
          {rules::one_of(names)});
  s.field("gpus_per_node", &O::gpus_per_node, "devices per node; 0: the preset's",
          {rules::at_least<int64_t>(0)});
  s.field("intra_latency_us", &O::intra_latency_us,
          "latency of one message inside a node (us); 0: the preset's", {rules::at_least(0.0)});
  s.field("intra_bandwidth_gbps", &O::intra_bandwidth_gbps,
          "bandwidth a device can use inside a node (Gbit/s); 0: the preset's",
          {rules::at_least(0.0)});
  s.field("inter_latency_us", &O::inter_latency_us,
          "latency of one message between nodes (us); 0: the preset's", {rules::at_least(0.0)});
  s.field("inter_bandwidth_gbps", &O::inter_bandwidth_gbps,
          "bandwidth of a node's network interface, shared by its devices (Gbit/s); 0: the "
          "preset's",
          {rules::at_least(0.0)});
  for (const char* level : {"intra", "inter"}) {
    const bool intra = std::string_view(level) == "intra";
    s.field(std::string(level) + "_rendezvous_bytes",
            intra ? &O::intra_rendezvous_bytes : &O::inter_rendezvous_bytes,
            std::string("protocol switch ") + (intra ? "inside a node" : "between nodes") +
                ": a message of more bytes than this pays " + level +
                "_rendezvous_latency_us instead of " + level +
                "_latency_us (MPI's eager/rendezvous step); 0: the network file's, else none",
            {rules::at_least(0.0)});
    s.field(std::string(level) + "_rendezvous_latency_us",
            intra ? &O::intra_rendezvous_latency_us : &O::inter_rendezvous_latency_us,
            std::string("latency of a message above ") + level +
                "_rendezvous_bytes (us); 0: the network file's",
            {rules::at_least(0.0)});
  }
  s.field("allreduce", &O::allreduce,
          "how allreduces are priced: as_logged (the algorithm the communicator recorded), "
          "ring, tree (halving-doubling) or hierarchical (reduce-scatter in the node, allreduce "
          "across nodes, allgather in the node)",
          {rules::one_of({"as_logged", "ring", "tree", "hierarchical"})});
  for (auto [key, member] : {std::pair{"allreduce_efficiency", &O::allreduce_efficiency},
                             std::pair{"allgather_efficiency", &O::allgather_efficiency},
                             std::pair{"reduce_scatter_efficiency", &O::reduce_scatter_efficiency},
                             std::pair{"alltoall_efficiency", &O::alltoall_efficiency}}) {
    s.field(key, member,
            "the collective's time is its alpha-beta time / this (a fitted correction, "
            "`bitlab calibrate`); 0: the network file's, else 1",
            {rules::at_least(0.0)});
  }
  s.field("file", &O::file,
          "a network file written by `bitlab calibrate` (docs/calibrate.md), used as the "
          "preset is (fields given here override its values); \"\": none. In an experiment "
          "file, relative to that file's folder",
          {});
  return s;
}

Schema<ComputeOptions> ComputeOptions::schema() {
  using O = ComputeOptions;
  Schema<O> s;
  s.field("step_ms", &O::step_ms,
          "compute time of one step (forward + backward + optimizer) per worker, ms; 0: "
          "derived from model_params, flops_per_param_sample and device_tflops",
          {rules::at_least(0.0)});
  s.field("model_params", &O::model_params,
          "parameters of the modelled network for the derived compute time; 0: the problem's "
          "dimension",
          {rules::at_least(0.0)});
  s.field("flops_per_param_sample", &O::flops_per_param_sample,
          "FLOPs per parameter per sample (forward + backward ≈ 6)", {rules::greater(0.0)});
  s.field("device_tflops", &O::device_tflops,
          "achieved device throughput, TFLOP/s; 0 (with step_ms 0): compute is not modelled",
          {rules::at_least(0.0)});
  s.field("memory_bandwidth_gbytes_per_s", &O::memory_bandwidth_gbytes_per_s,
          "device memory bandwidth (GB/s) pricing compression and decompression as bytes "
          "touched / bandwidth; 0: not modelled",
          {rules::at_least(0.0)});
  // Its name until GB/s was spelt out beside the network's Gbit/s (_gbps):
  // config.json of older results folders holds it (recost, --resume).
  s.alias("memory_bandwidth_gbs", "memory_bandwidth_gbytes_per_s");
  s.field("overlap", &O::overlap,
          "fraction of the backward pass (2/3 of compute) that can hide an uncompressed "
          "allreduce (DDP buckets); compressed collectives never overlap",
          {rules::in_closed(0.0, 1.0)});
  s.field("jitter", &O::jitter,
          "relative standard deviation of each worker's compute time per step",
          {rules::at_least(0.0)});
  s.field("straggler_worker", &O::straggler_worker, "a worker that is slower; -1: none",
          {rules::at_least<int64_t>(-1)});
  s.field("straggler_factor", &O::straggler_factor, "the straggler's compute time multiplier",
          {rules::at_least(1.0)});
  s.field("gradient_accumulation_steps", &O::gradient_accumulation_steps,
          "micro-steps per optimizer step (DeepSpeed's gradient_accumulation_steps): a step "
          "computes its batch in this many forward + backward passes and communicates once; "
          "step_ms is one micro-step's time (a step costs this many times step_ms), a derived "
          "time is the step's batch (the same FLOPs), and overlap hides an allreduce behind the "
          "last micro-step's backward only",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(int64_t{1} << 20)});
  return s;
}

namespace {

// The protocol switch of each level: the options' values, else the preset's
// (a network file's); a switch needs both its size and its latency.
void resolve_switches(const NetworkOptions& o, const NetworkPreset* preset, Topology& t) {
  struct Level {
    const char* name;
    double given_bytes, given_latency_us, preset_bytes, preset_latency_us;
    double &bytes, &latency_s;
  };
  Level levels[] = {
      {"intra", o.intra_rendezvous_bytes, o.intra_rendezvous_latency_us,
       preset ? preset->intra_rendezvous_bytes : 0, preset ? preset->intra_rendezvous_latency_us : 0,
       t.intra_rendezvous_bytes, t.intra_rendezvous_latency_s},
      {"inter", o.inter_rendezvous_bytes, o.inter_rendezvous_latency_us,
       preset ? preset->inter_rendezvous_bytes : 0, preset ? preset->inter_rendezvous_latency_us : 0,
       t.inter_rendezvous_bytes, t.inter_rendezvous_latency_s},
  };
  for (Level& l : levels) {
    const double bytes = l.given_bytes > 0 ? l.given_bytes : l.preset_bytes;
    const double latency_us = l.given_latency_us > 0 ? l.given_latency_us : l.preset_latency_us;
    const std::string b = std::string("network.") + l.name + "_rendezvous_bytes";
    const std::string a = std::string("network.") + l.name + "_rendezvous_latency_us";
    if (bytes > 0 && !(latency_us > 0))
      config_fail(a, Json(l.given_latency_us), "must be > 0 when " + b + " is given (a protocol "
                  "switch needs the size and the latency above it)");
    if (latency_us > 0 && !(bytes > 0))
      config_fail(b, Json(l.given_bytes), "must be > 0 when " + a + " is given (a protocol "
                  "switch needs the size and the latency above it)");
    l.bytes = bytes;
    l.latency_s = latency_us * 1e-6;
  }
}

}  // namespace

Topology make_topology(const NetworkOptions& o, int64_t workers) {
  Topology t;
  t.name = o.preset;
  t.allreduce = o.allreduce;
  const NetworkPreset* preset = nullptr;
  for (const auto& p : network_presets()) {
    if (p.name == o.preset) preset = &p;
  }
  // A network file stands in for a preset (and needs no "custom").
  NetworkFile from_file;
  if (!o.file.empty()) {
    if (preset) {
      config_fail("network.file", Json(o.file),
                  "give either network.preset (\"" + o.preset + "\") or network.file, not both");
    }
    from_file = read_network_file(o.file);
    preset = &from_file.links;
    t.name = "file:" + from_file.links.name;
    if (o.allreduce == "as_logged") t.allreduce = from_file.allreduce;
    t.efficiency = from_file.efficiency;
    if (!from_file.fitted_nodes.empty()) {
      t.fitted_min_nodes = *std::min_element(from_file.fitted_nodes.begin(),
                                             from_file.fitted_nodes.end());
      t.fitted_max_nodes = *std::max_element(from_file.fitted_nodes.begin(),
                                             from_file.fitted_nodes.end());
    }
  }
  auto pick = [&](double given, double from_preset, const char* field) {
    if (given > 0) return given;
    if (preset) return from_preset;
    config_fail(std::string("network.") + field, Json(given), "must be > 0 for a custom network");
  };
  auto efficiency = [](double given, double& slot) {
    if (given > 0) slot = given;
  };
  efficiency(o.allreduce_efficiency, t.efficiency.allreduce);
  efficiency(o.allgather_efficiency, t.efficiency.allgather);
  efficiency(o.reduce_scatter_efficiency, t.efficiency.reduce_scatter);
  efficiency(o.alltoall_efficiency, t.efficiency.alltoall);
  if (!preset && o.preset != "custom") {
    std::vector<std::string> names = {"custom"};
    for (const auto& p : network_presets()) names.push_back(p.name);
    config_fail("network.preset", Json(o.preset), one_of_message(o.preset, names));
  }
  const int g = static_cast<int>(o.gpus_per_node > 0 ? o.gpus_per_node
                                                     : (preset ? preset->gpus_per_node : 0));
  if (g <= 0)
    config_fail("network.gpus_per_node", Json(o.gpus_per_node), "must be > 0 for a custom network");
  t.intra_latency_s =
      pick(o.intra_latency_us, preset ? preset->intra_latency_us : 0, "intra_latency_us") * 1e-6;
  t.intra_bytes_per_s = pick(o.intra_bandwidth_gbps, preset ? preset->intra_bandwidth_gbps : 0,
                             "intra_bandwidth_gbps") *
                        kGbpsToBytesPerS;
  t.inter_latency_s =
      pick(o.inter_latency_us, preset ? preset->inter_latency_us : 0, "inter_latency_us") * 1e-6;
  t.inter_bytes_per_s = pick(o.inter_bandwidth_gbps, preset ? preset->inter_bandwidth_gbps : 0,
                             "inter_bandwidth_gbps") *
                        kGbpsToBytesPerS;
  resolve_switches(o, preset, t);
  t.source = preset ? preset->source : "custom values";
  if (workers <= g) {
    t.nodes = 1;
    t.gpus_per_node = static_cast<int>(workers);
  } else {
    if (workers % g != 0) {
      config_fail("network.gpus_per_node", Json(g),
                  "must divide cluster.workers (" + std::to_string(workers) + ")");
    }
    t.nodes = static_cast<int>(workers / g);
    t.gpus_per_node = g;
  }
  return t;
}

namespace {

struct Link {
  double alpha_s, bytes_per_s;
  // The protocol switch: 0 = none.
  double rendezvous_bytes = 0, rendezvous_alpha_s = 0;
  // The latency of one message of `message_bytes`.
  double alpha(double message_bytes) const {
    return rendezvous_bytes > 0 && message_bytes > rendezvous_bytes ? rendezvous_alpha_s : alpha_s;
  }
};

Link intra_link(const Topology& t) {
  return {t.intra_latency_s, t.intra_bytes_per_s, t.intra_rendezvous_bytes,
          t.intra_rendezvous_latency_s};
}
Link inter_link(const Topology& t) {
  return {t.inter_latency_s, t.inter_bytes_per_s, t.inter_rendezvous_bytes,
          t.inter_rendezvous_latency_s};
}

// `rounds` messages of factor·s / rounds bytes each.
double ring_like(int p, double s, Link l, double rounds, double factor) {
  if (p <= 1) return 0.0;
  return rounds * l.alpha(factor * s / rounds) + factor * s / l.bytes_per_s;
}

// The link a collective over `ranks` ranks of scope `scope` runs on.
Link link_for(const CommRecord& r, const Topology& t) {
  const Link intra = intra_link(t);
  Link inter = inter_link(t);
  const std::string_view scope(r.scope);
  if (scope == "intra") return intra;
  // The `groups` inter-node groups of a record (one per local rank, as in
  // LoCo's second stage) share each node's NIC: each gets 1/groups of it.
  if (scope == "inter") {
    inter.bytes_per_s /= std::max(1, r.groups);
    return inter;
  }
  // "all": the ranks span every node when there is more than one.
  if (t.nodes <= 1) return intra;
  inter.bytes_per_s = std::min(intra.bytes_per_s, inter.bytes_per_s);
  return inter;
}

double allreduce_time(const CommRecord& r, const Topology& t, std::string_view algo) {
  const int p = r.ranks;
  const double s = static_cast<double>(r.payload_bytes);
  if (p <= 1) return 0.0;
  if (algo == "hierarchical" && std::string_view(r.scope) == "all" && t.nodes > 1) {
    const int g = t.gpus_per_node, nodes = t.nodes;
    // reduce-scatter and allgather inside the node on S
    const double rs = ring_like(g, s, intra_link(t), g - 1, static_cast<double>(g - 1) / g);
    // allreduce across nodes on S/g per GPU, messages of S/(g·N); the g GPUs
    // share the NIC, so each gets inter/g: 2(N−1)/N · (S/g)/(B/g) = 2(N−1)/N · S/B
    const double ar = 2.0 * (nodes - 1) * inter_link(t).alpha(s / g / nodes) +
                      2.0 * (nodes - 1) / nodes * s / t.inter_bytes_per_s;
    return rs + ar + rs;
  }
  const Link l = link_for(r, t);
  const double factor = 2.0 * (p - 1) / p;
  if (algo == "tree") return ring_like(p, s, l, 2.0 * ceil_log2(p), factor);
  return ring_like(p, s, l, 2.0 * (p - 1), factor);
}

// The α-β time of a collective, before its efficiency.
double alpha_beta_time_s(const CommRecord& r, const Topology& t) {
  const int p = r.ranks;
  if (p <= 1) return 0.0;
  const std::string_view op(r.op);
  const double s = static_cast<double>(r.payload_bytes);
  if (op == "allreduce") {
    const std::string_view algo =
        t.allreduce == "as_logged" ? std::string_view(r.algorithm) : std::string_view(t.allreduce);
    return allreduce_time(r, t, algo);
  }
  const Link l = link_for(r, t);
  if (op == "allgather" || op == "reduce_scatter") {
    return ring_like(p, s, l, p - 1, static_cast<double>(p - 1) / p);
  }
  if (op == "alltoall") {
    const double base = ring_like(p, s, l, p - 1, static_cast<double>(p - 1) / p);
    if (std::string_view(r.scope) != "all" || t.nodes <= 1) return base;
    // Across nodes the NIC carries the off-node part of all g ranks' traffic.
    const int g = t.gpus_per_node;
    const double off_node = g * s * static_cast<double>(p - g) / p;
    return std::max(base, (p - 1) * inter_link(t).alpha(s / p) + off_node / t.inter_bytes_per_s);
  }
  if (op == "broadcast") return ceil_log2(p) * (l.alpha(s) + s / l.bytes_per_s);
  return 0.0;
}

}  // namespace

double collective_time_s(const CommRecord& r, const Topology& t) {
  // Efficiencies are 1 unless a network file or the experiment gives one:
  // x / 1.0 is x, so the presets' prices keep their bits.
  const std::string_view op(r.op);
  const double e = op == "allreduce"        ? t.efficiency.allreduce
                   : op == "allgather"      ? t.efficiency.allgather
                   : op == "reduce_scatter" ? t.efficiency.reduce_scatter
                   : op == "alltoall"       ? t.efficiency.alltoall
                                            : 1.0;
  return alpha_beta_time_s(r, t) / e;
}

LinkTimes collective_link_times(const CommRecord& r, const Topology& t) {
  LinkTimes out;
  const double time = collective_time_s(r, t);
  const std::string_view scope(r.scope), op(r.op);
  if (scope == "intra" || (scope == "all" && t.nodes <= 1)) {
    out.intra_s = time;
    return out;
  }
  if (scope == "inter") {
    out.inter_s = time;
    return out;
  }
  const std::string_view algo =
      t.allreduce == "as_logged" ? std::string_view(r.algorithm) : std::string_view(t.allreduce);
  if (op == "allreduce" && algo == "hierarchical" && r.ranks > 1) {
    // As allreduce_time: the two intra-node passes, the rest across nodes.
    const int g = t.gpus_per_node;
    const double s = static_cast<double>(r.payload_bytes);
    const double rs = ring_like(g, s, intra_link(t), g - 1, static_cast<double>(g - 1) / g);
    out.intra_s = std::min(time, 2 * rs / t.efficiency.allreduce);
    out.inter_s = time - out.intra_s;
    return out;
  }
  // A flat collective across nodes: bounded by the slower bandwidth.
  (t.inter_bytes_per_s <= t.intra_bytes_per_s || op == "alltoall" ? out.inter_s : out.intra_s) =
      time;
  return out;
}

std::string link_text(bool inter, const Topology& t) {
  char buf[128];
  if (inter) {
    std::snprintf(buf, sizeof buf, "across nodes: NIC %g Gbit/s per node, %g us",
                  t.inter_bytes_per_s * 8 / 1e9, t.inter_latency_s * 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "inside a node: %g Gbit/s, %g us",
                  t.intra_bytes_per_s * 8 / 1e9, t.intra_latency_s * 1e6);
  }
  return buf;
}

double bus_factor(const CommRecord& r) {
  const int p = r.ranks;
  if (p <= 1) return 0.0;
  const std::string_view op(r.op);
  if (op == "allreduce") return 2.0 * (p - 1) / p;
  if (op == "broadcast") return 1.0;
  return static_cast<double>(p - 1) / p;
}

double compression_bytes_touched(const CommRecord& r) {
  const std::string_view dt(r.dtype);
  double bits_per_element = 0;
  if (dt == "bits")
    bits_per_element = 1;
  else if (dt.size() == 4 && dt.substr(0, 3) == "int")
    bits_per_element = dt[3] - '0';
  else if (dt == "fp16" || dt == "bf16")
    return 0.0;  // a cast fused into the copy
  else
    return 0.0;
  // Encode on the sender: read the fp32 input and its error buffer, write the
  // error back (12 bytes/element); decode on the receiver: write 4 bytes.
  // Elements follow from the bytes on the wire.
  const double elements = static_cast<double>(r.payload_bytes) * 8.0 / bits_per_element;
  return 16.0 * elements;
}

StepTime price_step(const std::vector<CommRecord>& records, const Topology& t,
                    const std::vector<double>& worker_compute_s, const ComputeOptions& c) {
  StepTime st;
  for (double w : worker_compute_s) st.compute_s = std::max(st.compute_s, w);
  double overlappable = 0, exposed = 0;
  for (const auto& r : records) {
    const double time = collective_time_s(r, t);
    const std::string_view dt(r.dtype);
    const bool plain = dt == "fp32" || dt == "fp16" || dt == "bf16";
    if (std::string_view(r.op) == "allreduce" && plain) {
      overlappable += time;
    } else {
      exposed += time;
    }
    if (c.memory_bandwidth_gbytes_per_s > 0) {
      st.compression_s += compression_bytes_touched(r) / (c.memory_bandwidth_gbytes_per_s * 1e9);
    }
  }
  // Backward is 2/3 of compute; `overlap` of it can hide the DDP-style
  // gradient allreduce. The 1-bit family compresses inside the optimizer
  // step, so its collectives are never hidden.
  // With gradient accumulation only the last micro-step's backward can
  // (DeepSpeed allreduces at the accumulation boundary); x / 1 is exact.
  const double hidden =
      std::min(overlappable, c.overlap * (2.0 / 3.0) * st.compute_s /
                                 static_cast<double>(c.gradient_accumulation_steps));
  // (overlappable − hidden) first: exposed + 0 stays exactly `exposed`, so a
  // faster link is never priced slower by a rounding step.
  st.comm_s = exposed + (overlappable - hidden) + st.compression_s;
  st.step_s = st.compute_s + st.comm_s;
  return st;
}

double base_compute_s(const ComputeOptions& c, double model_params, double samples_per_worker) {
  if (c.step_ms > 0) {
    return static_cast<double>(c.gradient_accumulation_steps) * (c.step_ms * 1e-3);
  }
  if (c.device_tflops <= 0) return 0.0;
  const double params = c.model_params > 0 ? c.model_params : model_params;
  return c.flops_per_param_sample * params * samples_per_worker / (c.device_tflops * 1e12);
}

void worker_compute_s(const ComputeOptions& c, double base_s, uint64_t seed, int64_t step,
                      std::vector<double>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    double v = base_s;
    if (c.jitter > 0) {
      RngStream rng(seed, Purpose::kJitter, static_cast<uint32_t>(i), static_cast<uint64_t>(step));
      v *= std::max(0.0, 1.0 + c.jitter * rng.next_normal());
    }
    if (static_cast<int64_t>(i) == c.straggler_worker) v *= c.straggler_factor;
    out[i] = v;
  }
}

void worker_compute_s(const ComputeOptions& c, const std::vector<double>& base_s, uint64_t seed,
                      int64_t step, std::vector<double>& out) {
  out.resize(base_s.size());
  worker_compute_s(c, 1.0, seed, step, out);
  for (size_t i = 0; i < out.size(); ++i) out[i] *= base_s[i];
}

}  // namespace bitlab
