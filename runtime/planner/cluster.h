// The machines a plan is for: nodes of identical devices, the memory of one device, and the
// bandwidth and latency of a link inside a node and between nodes. Read from JSON
//   {"nodes": 1, "devices_per_node": 2,
//    "device": {"kind": "cpu", "memory_gib": 8},
//    "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5},
//    "inter_node": {"bandwidth_gb_per_s": 1.25, "latency_us": 50},
//    "processes": {"p2p": {"bandwidth_gb_per_s": 3, "latency_us": 2},
//                  "allreduce": {"bandwidth_gb_per_s": 1.5, "latency_us": 30}}}
// (GB = 1e9 bytes, GiB = 2^30) strictly: an unknown field or a bad value is an error naming its
// JSON path. measure_this_machine() fills one for the machine it runs on (threads only; `pipeforge
// plan --measure` adds the processes' links from an mpirun probe).
//
// "processes" (optional) is what one process per rank pays inside a node: D > 1 trains under
// mpirun, and then a pipeline hand-off is an MPI message and the gradient all-reduce an
// MPI_Allreduce, not a hand-over between threads. Without it, processes are taken to pay
// intra_node.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

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
  bool has_process_links = false;
  Link process_p2p;        // a SEND/RECV between two processes of one node
  // A 2-process all-reduce of B bytes takes B / bandwidth + 2 latency (the terms of
  // sched::ring_allreduce_time, which extrapolates it to D replicas).
  Link process_allreduce;

  int devices() const { return nodes * devices_per_node; }
  // The link between two devices numbered 0 .. devices() - 1, node by node; `processes`: between
  // two processes (one per rank), which inside a node is process_p2p when known.
  const Link& link(int device_a, int device_b, bool processes = false) const;
  // The link a gradient all-reduce between the two devices runs at.
  const Link& allreduce_link(int device_a, int device_b, bool processes) const;
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
