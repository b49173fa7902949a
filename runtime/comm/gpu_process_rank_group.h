// One process per rank on CUDA devices: failures travel as in ProcessRankGroup (the pipeline world
// and the data-parallel group are aborted, and stay so), messages through the CUDA backend's NCCL
// process transport (nccl_process_transport.h), which is cancelled with them.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "runtime/comm/gpu_transport_group.h"
#include "runtime/comm/process_rank_group.h"

namespace pf::comm {

class GpuProcessRankGroup : public RankGroup {
 public:
  GpuProcessRankGroup(std::shared_ptr<World> world, std::shared_ptr<World> data_parallel,
                      std::unique_ptr<GpuTransportGroup> transport)
      : processes_(world, std::move(data_parallel)), world_(std::move(world)), transport_(std::move(transport)) {}
  Transport& endpoint(int rank) override { return transport_->endpoint(rank); }
  void rank_failed(int rank, const std::string& what) override {
    processes_.rank_failed(rank, what);
    if (!transport_->cancelled()) transport_->cancel(world_->abort_cause());
  }
  bool cancelled() const override { return processes_.cancelled() || transport_->cancelled(); }
  std::string cause() const override {
    if (processes_.cancelled()) return processes_.cause();
    return transport_->cancelled() ? "another rank failed" : std::string();
  }
  // Releases finished sends; a failed step leaves the world (and the transport) cancelled.
  void reset() override { transport_->reset(); }
  const GpuTransportGroup* gpu_transport() const override { return transport_.get(); }

 private:
  ProcessRankGroup processes_;
  std::shared_ptr<World> world_;
  std::unique_ptr<GpuTransportGroup> transport_;
};

}  // namespace pf::comm
