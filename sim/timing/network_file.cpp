#include "sim/timing/network_file.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

namespace bitlab {

namespace {

[[noreturn]] void file_fail(const std::string& path, const std::string& what) {
  throw ConfigError("network.file = " + show_value(Json(path)) + ": " + what, "network.file");
}

double positive(const Json& net, const std::string& path, const char* key) {
  if (!net.contains(key)) file_fail(path, std::string("network.") + key + ": missing");
  const Json& v = net.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
    file_fail(path, std::string("network.") + key + " = " + show_value(v) + ": must be a number > 0");
  return v.get<double>();
}

// An efficiency divides a collective's alpha-beta time: in (0, 1] (1: the
// model's time; above 1 would price a collective faster than its links).
double efficiency(const Json& net, const std::string& path, const char* key) {
  if (!net.contains(key)) return 1.0;
  const Json& v = net.at(key);
  if (!v.is_number() || !(v.get<double>() > 0) || !(v.get<double>() <= 1))
    file_fail(path, std::string("network.") + key + " = " + show_value(v) +
                        ": must lie in (0, 1] (the share of the alpha-beta time's speed a "
                        "collective reaches)");
  return v.get<double>();
}

}  // namespace

NetworkFile read_network_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) file_fail(path, "cannot be read (no such file, or not permitted)");
  std::stringstream text;
  text << in.rdbuf();
  Json j;
  try {
    j = Json::parse(text.str());
  } catch (const Json::exception& e) {
    file_fail(path, std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object() || j.value("format", Json()) != Json(kNetworkFileFormat))
    file_fail(path, std::string("format must be \"") + kNetworkFileFormat +
                        "\" (a file written by `bitlab calibrate`)");
  if (!j.contains("network") || !j["network"].is_object())
    file_fail(path, "network: missing (an object of network fields)");
  const Json& net = j["network"];
  static const std::vector<std::string> kKeys = {
      "gpus_per_node", "intra_latency_us", "intra_bandwidth_gbps", "inter_latency_us",
      "inter_bandwidth_gbps", "allreduce", "allreduce_efficiency", "allgather_efficiency",
      "reduce_scatter_efficiency", "alltoall_efficiency", "intra_rendezvous_bytes",
      "intra_rendezvous_latency_us", "inter_rendezvous_bytes", "inter_rendezvous_latency_us"};
  for (const auto& [key, value] : net.items()) {
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end())
      file_fail(path, "network." + key + ": unknown key; " + one_of_message(key, kKeys));
  }
  NetworkFile f;
  f.links.name = j.value("name", std::string("file"));
  f.links.source = "network file " + path + (j.contains("source") && j["source"].is_string()
                                                 ? " (" + j["source"].get<std::string>() + ")"
                                                 : std::string());
  const double g = positive(net, path, "gpus_per_node");
  if (g != std::floor(g) || g > 1e6)
    file_fail(path, "network.gpus_per_node = " + show_value(net["gpus_per_node"]) +
                        ": must be a whole number of devices (1 to 10^6)");
  f.links.gpus_per_node = static_cast<int>(g);
  f.links.intra_latency_us = positive(net, path, "intra_latency_us");
  f.links.intra_bandwidth_gbps = positive(net, path, "intra_bandwidth_gbps");
  f.links.inter_latency_us = positive(net, path, "inter_latency_us");
  f.links.inter_bandwidth_gbps = positive(net, path, "inter_bandwidth_gbps");
  for (const char* level : {"intra", "inter"}) {
    // A protocol switch: both keys or neither.
    const std::string b = std::string(level) + "_rendezvous_bytes";
    const std::string a = std::string(level) + "_rendezvous_latency_us";
    if (net.contains(b) != net.contains(a))
      file_fail(path, "network." + (net.contains(b) ? a : b) + ": missing (a protocol switch "
                      "needs " + b + " and " + a + ")");
    if (!net.contains(b)) continue;
    const bool intra = std::string_view(level) == "intra";
    (intra ? f.links.intra_rendezvous_bytes : f.links.inter_rendezvous_bytes) =
        positive(net, path, b.c_str());
    (intra ? f.links.intra_rendezvous_latency_us : f.links.inter_rendezvous_latency_us) =
        positive(net, path, a.c_str());
  }
  const Json algo = net.value("allreduce", Json("ring"));
  if (algo != "ring" && algo != "tree" && algo != "hierarchical")
    file_fail(path, "network.allreduce = " + show_value(algo) +
                        ": must be \"ring\", \"tree\" or \"hierarchical\"");
  f.allreduce = algo.get<std::string>();
  f.efficiency.allreduce = efficiency(net, path, "allreduce_efficiency");
  f.efficiency.allgather = efficiency(net, path, "allgather_efficiency");
  f.efficiency.reduce_scatter = efficiency(net, path, "reduce_scatter_efficiency");
  f.efficiency.alltoall = efficiency(net, path, "alltoall_efficiency");
  // The fit's report is not checked (a hand-written file may have none);
  // only well-formed node counts are kept.
  const Json fit = j.value("fit", Json::object());
  if (fit.is_object() && fit.contains("points") && fit["points"].is_array()) {
    for (const Json& point : fit["points"]) {
      if (point.is_object() && point.contains("nodes") && point["nodes"].is_number_integer() &&
          point["nodes"].get<int64_t>() >= 1 && point["nodes"].get<int64_t>() <= (1 << 20)) {
        f.fitted_nodes.push_back(static_cast<int>(point["nodes"].get<int64_t>()));
      }
    }
  }
  return f;
}

Json network_file_json(const NetworkFile& f, const Json& fit) {
  Json j;
  j["format"] = kNetworkFileFormat;
  j["name"] = f.links.name;
  j["source"] = f.links.source;
  Json net;
  net["gpus_per_node"] = f.links.gpus_per_node;
  net["intra_latency_us"] = f.links.intra_latency_us;
  net["intra_bandwidth_gbps"] = f.links.intra_bandwidth_gbps;
  net["inter_latency_us"] = f.links.inter_latency_us;
  net["inter_bandwidth_gbps"] = f.links.inter_bandwidth_gbps;
  // The protocol switches, where fitted (a file without them has none).
  if (f.links.intra_rendezvous_bytes > 0) {
    net["intra_rendezvous_bytes"] = f.links.intra_rendezvous_bytes;
    net["intra_rendezvous_latency_us"] = f.links.intra_rendezvous_latency_us;
  }
  if (f.links.inter_rendezvous_bytes > 0) {
    net["inter_rendezvous_bytes"] = f.links.inter_rendezvous_bytes;
    net["inter_rendezvous_latency_us"] = f.links.inter_rendezvous_latency_us;
  }
  net["allreduce"] = f.allreduce;
  net["allreduce_efficiency"] = f.efficiency.allreduce;
  net["allgather_efficiency"] = f.efficiency.allgather;
  net["reduce_scatter_efficiency"] = f.efficiency.reduce_scatter;
  net["alltoall_efficiency"] = f.efficiency.alltoall;
  j["network"] = net;
  j["fit"] = fit;
  return j;
}

}  // namespace bitlab
