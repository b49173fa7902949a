// Ranks on CUDA devices, threads of this process: ranks on one device hand tensors over in process
// (stream-ordered by events), ranks on distinct devices that talk use NCCL (nccl_pairs).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/gpu_transport_group.h"
#include "runtime/comm/rank_group.h"

namespace pf::comm {

// The pairs (a < b) among `talking` (ranks that send to each other) whose ranks are on distinct
// devices (`rank_device`: the CUDA ordinal of each rank): the ones NCCL carries. Sorted, unique.
inline std::vector<std::pair<int, int>> nccl_pairs(const std::vector<int>& rank_device,
                                                   const std::vector<std::pair<int, int>>& talking) {
  std::vector<std::pair<int, int>> out;
  for (const auto& [a, b] : talking)
    if (rank_device[static_cast<size_t>(a)] != rank_device[static_cast<size_t>(b)])
      out.emplace_back(std::min(a, b), std::max(a, b));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

class GpuRankGroup : public RankGroup {
 public:
  explicit GpuRankGroup(std::unique_ptr<GpuTransportGroup> transport) : transport_(std::move(transport)) {}
  Transport& endpoint(int rank) override { return transport_->endpoint(rank); }
  void rank_failed(int rank, const std::string& what) override {
    if (!transport_->cancelled()) transport_->cancel("rank " + std::to_string(rank) + " failed: " + what);
  }
  bool cancelled() const override { return transport_->cancelled(); }
  std::string cause() const override { return cancelled() ? "another rank failed" : std::string(); }
  void reset() override { transport_->reset(); }
  const GpuTransportGroup* gpu_transport() const override { return transport_.get(); }

 private:
  std::unique_ptr<GpuTransportGroup> transport_;
};

}  // namespace pf::comm
