// The machines a plan is for: nodes of identical devices, the memory of one device, and the
// bandwidth and latency of a link inside a node and between nodes. Read from JSON
//   {"nodes": 1, "devices_per_node": 2,
//    "device": {"kind": "cpu", "memory_gib": 8},
//    "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5},
//    "inter_node": {"bandwidth_gb_per_s": 1.25, "latency_us": 50}}
// (GB = 1e9 bytes, GiB = 2^30) strictly: an unknown field or a bad value is an error naming its
// JSON path. measure_this_machine() fills one for the machine it runs on.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace pf::plan {

struct Link {
  double bandwidth_bytes_per_s = 10e9;
  double latency_s = 5e-6;
  // Seconds to move `bytes` over the link once.
  double transfer_seconds(double bytes) const { return latency_s + bytes / bandwidth_bytes_per_s; }
};

struct Cluster {
  int nodes = 1;
  int devices_per_node = 1;
  std::string device_kind = "cpu";  // "cpu" (a core per rank) or "cuda"
  int64_t device_memory_bytes = int64_t{8} << 30;
  Link intra_node;
  Link inter_node;

  int devices() const { return nodes * devices_per_node; }
  // The link between two devices numbered 0 .. devices() - 1, node by node.
  const Link& link(int device_a, int device_b) const;
};

// Throws kInvalidArgument naming `where` and the JSON path.
Cluster cluster_from_json(const nlohmann::json& value, const std::string& where);
nlohmann::json cluster_to_json(const Cluster& cluster);

// This machine as one node: one device per core (`devices` > 0 overrides the count), each with
// an equal share of the available memory; the intra-node link measured between two threads (a
// copy of 16 MiB for the bandwidth, a hand-off round trip for the latency). inter_node is set
// equal to intra_node (there is one node).
Cluster measure_this_machine(int devices = 0);

}  // namespace pf::plan
