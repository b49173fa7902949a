// The rank group of a plan: the one place that chooses among threads, processes and CUDA devices.
#include <memory>
#include <utility>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/gpu_rank_group.h"
#include "runtime/comm/process_rank_group.h"
#include "runtime/comm/thread_rank_group.h"
#include "runtime/execution/pipeline_trainer.h"

namespace pf::exec {
namespace {

// The rank pairs that send each other activations or gradients in `s` (a lowered schedule).
std::vector<std::pair<int, int>> talking_pairs(const sched::Schedule& s) {
  std::vector<std::pair<int, int>> pairs;
  for (int r = 0; r < s.num_ranks(); ++r) {
    for (const auto& a : s.ranks[static_cast<size_t>(r)]) {
      int peer = -1;
      if (a.kind == sched::ActionKind::kSendF || a.kind == sched::ActionKind::kRecvB) peer = s.placement.rank_of(a.stage + 1);
      if (a.kind == sched::ActionKind::kSendB || a.kind == sched::ActionKind::kRecvF) peer = s.placement.rank_of(a.stage - 1);
      if (peer >= 0) pairs.emplace_back(r, peer);
    }
  }
  return pairs;
}

}  // namespace

std::unique_ptr<comm::RankGroup> make_rank_group(const PipelinePlan& plan) {
  const TrainingConfig& c = plan.config;
  comm::InProcessTransport::Options options;
  options.mailbox_capacity = c.mailbox_capacity;
  options.spin_seconds = c.spin_seconds;
  switch (plan.placement) {
    case RankPlacement::kProcesses:
      return std::make_unique<comm::ProcessRankGroup>(c.world, c.data_parallel_world);
    case RankPlacement::kGpu:
      return std::make_unique<comm::GpuRankGroup>(cuda_backend().new_gpu_transport(
          plan.rank_device, comm::nccl_pairs(plan.rank_device, talking_pairs(plan.schedule)), options,
          c.mailbox_capacity));
    case RankPlacement::kThreads:
      break;
  }
  return std::make_unique<comm::ThreadRankGroup>(plan.schedule.num_ranks(), options);
}

}  // namespace pf::exec
