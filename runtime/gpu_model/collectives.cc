#include "runtime/gpu_model/collectives.h"

namespace pf::gpu {

std::vector<int> Grid::tensor_group() const {
  std::vector<int> g;
  for (int t = 0; t < tensor; ++t) g.push_back(rank(t, 0, 0));
  return g;
}

std::vector<int> Grid::data_group() const {
  std::vector<int> g;
  for (int d = 0; d < data; ++d) g.push_back(rank(0, d, 0));
  return g;
}

std::vector<int> Grid::pipeline_group() const {
  std::vector<int> g;
  for (int p = 0; p < pipeline; ++p) g.push_back(rank(0, 0, p));
  return g;
}

const LinkSpec& group_link(const GpuSystem& system, const std::vector<int>& ranks) {
  if (ranks.empty()) return system.nvlink;
  const int node = ranks.front() / system.gpus_per_node;
  for (int r : ranks)
    if (r / system.gpus_per_node != node) return system.network;
  return system.nvlink;
}

double allreduce_seconds(const LinkSpec& link, int members, double bytes) {
  if (members <= 1 || bytes <= 0) return 0;
  const double n = members;
  return 2 * (n - 1) / n * bytes / link.effective() + 2 * (n - 1) * link.latency_s;
}

double allgather_seconds(const LinkSpec& link, int members, double bytes) {
  if (members <= 1 || bytes <= 0) return 0;
  const double n = members;
  return (n - 1) / n * bytes / link.effective() + (n - 1) * link.latency_s;
}

double p2p_seconds(const LinkSpec& link, double bytes) {
  if (bytes <= 0) return 0;
  return bytes / link.effective() + link.latency_s;
}

}  // namespace pf::gpu
