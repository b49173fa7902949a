// One process per rank: this process's rank of the pipeline group `world`, and (data parallel) the
// group of its replicas, which learn of a failure too and tell theirs.
#pragma once

#include <memory>
#include <utility>

#include "runtime/comm/rank_group.h"
#include "runtime/comm/world.h"

namespace pf::comm {

class ProcessRankGroup : public RankGroup {
 public:
  ProcessRankGroup(std::shared_ptr<World> world, std::shared_ptr<World> data_parallel)
      : world_(std::move(world)), data_parallel_(std::move(data_parallel)) {}
  Transport& endpoint(int) override { return world_->endpoint(); }
  // Every failure is told: the World names the failed rank itself.
  void rank_failed(int, const std::string& what) override {
    if (data_parallel_ && !data_parallel_->aborted()) data_parallel_->abort(what);
    if (!world_->aborted()) world_->abort(what);
  }
  bool cancelled() const override { return world_->aborted() || (data_parallel_ && data_parallel_->aborted()); }
  std::string cause() const override {
    if (!cancelled()) return std::string();
    for (const World* w : {world_.get(), data_parallel_.get()})
      if (w && w->aborted()) return w->abort_cause();
    return "another rank failed";
  }
  void reset() override {}  // a failed step leaves the world aborted: later steps fail

 private:
  std::shared_ptr<World> world_, data_parallel_;
};

}  // namespace pf::comm
