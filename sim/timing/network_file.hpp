// Network files: a cluster's measured links, written by `bitlab calibrate`
// (calibrate.hpp) and read wherever a network preset can be named
// (network.file in an experiment, `--network-file` on `cost` and `recost`).
// A network file stands in for a preset: make_topology takes its values, and
// any network field the experiment gives overrides them. docs/calibrate.md
// describes the format:
//
//   {"format": "bitlab-network-1", "name": "...", "source": "...",
//    "network": {"gpus_per_node": 4, "intra_latency_us": ..., "intra_bandwidth_gbps": ...,
//                "inter_latency_us": ..., "inter_bandwidth_gbps": ...,
//                "allreduce": "ring", "allreduce_efficiency": 1, ...,
//                optional, both or neither per level: "intra_rendezvous_bytes": 2048,
//                "intra_rendezvous_latency_us": ...},
//    "fit": {...}}   (the fit's report; not read back)
#pragma once

#include <string>
#include <vector>

#include "sim/core/schema.hpp"
#include "sim/timing/network.hpp"

namespace bitlab {

inline constexpr const char* kNetworkFileFormat = "bitlab-network-1";

struct NetworkFile {
  NetworkPreset links;  // name, gpus_per_node, latencies, bandwidths, source
  std::string allreduce = "ring";
  CollectiveEfficiency efficiency;
  // The node counts of the measurements the file was fitted on, read from
  // its fit report (fit.points[].nodes, which calibrate writes); empty when
  // the file does not record them. `cost` warns beyond them.
  std::vector<int> fitted_nodes;
};

// Reads and checks `path`; throws ConfigError naming network.file, the file,
// the field and the rule (an unreadable file, another format, a missing or
// non-positive value, an unknown key).
NetworkFile read_network_file(const std::string& path);

// The file's JSON (written by the caller, atomically): `network` holds every
// value, `fit` the calibration's report.
Json network_file_json(const NetworkFile& f, const Json& fit);

}  // namespace bitlab
