// Ranks as threads of this process: a ThreadWorld's members, zero-copy hand-over.
#pragma once

#include "runtime/comm/rank_group.h"
#include "runtime/comm/thread_world.h"

namespace pf::comm {

class ThreadRankGroup : public RankGroup {
 public:
  ThreadRankGroup(int ranks, InProcessTransport::Options options) : world_(ranks, options) {}
  Transport& endpoint(int rank) override { return world_.member(rank).endpoint(); }
  // The first failure wakes every other rank; a rank cancelled by it adds nothing.
  void rank_failed(int rank, const std::string& what) override {
    if (!world_.aborted()) world_.member(rank).abort(what);
  }
  bool cancelled() const override { return world_.aborted(); }
  std::string cause() const override { return world_.aborted() ? world_.abort_cause() : std::string(); }
  void reset() override { world_.reset(); }

 private:
  ThreadWorld world_;
};

}  // namespace pf::comm
