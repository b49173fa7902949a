// Seconds of the collectives and messages of 3D training on a GpuSystem (docs/PREDICT.md,
// "Collectives"). Ranks are numbered tp + T (dp + D pp) (Megatron's order; TP neighbours share a
// node) and placed gpus_per_node to a node. A group whose members all sit on one node runs over
// NVLink; one that spans nodes runs at the network's bandwidth per GPU (each GPU has its own NIC
// share, so a ring's slowest hop is a network one). Ring algorithms:
//   all-reduce      2 (n-1)/n x bytes / bus bandwidth + 2 (n-1) latencies
//   all-gather and reduce-scatter   half of that (bytes: the whole gathered tensor)
//   point-to-point  bytes / bandwidth + one latency
// with the bus bandwidth the link's bandwidth x its efficiency.
#pragma once

#include <vector>

#include "runtime/gpu_model/gpu_system.h"

namespace pf::gpu {

struct Grid {
  int tensor = 1;    // T
  int pipeline = 1;  // P
  int data = 1;      // D
  int size() const { return tensor * pipeline * data; }
  int rank(int tp, int dp, int pp) const { return tp + tensor * (dp + data * pp); }
  // The members of rank 0's group along one dimension (the first TP, DP and PP groups).
  std::vector<int> tensor_group() const;
  std::vector<int> data_group() const;
  std::vector<int> pipeline_group() const;
};

// The link a group of global ranks runs on: NVLink when every member is on one node.
const LinkSpec& group_link(const GpuSystem& system, const std::vector<int>& ranks);

double allreduce_seconds(const LinkSpec& link, int members, double bytes);
double allgather_seconds(const LinkSpec& link, int members, double bytes);  // = reduce-scatter
double p2p_seconds(const LinkSpec& link, double bytes);

}  // namespace pf::gpu
