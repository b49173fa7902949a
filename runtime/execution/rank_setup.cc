// The ranks of a plan as this process runs them: their group (the one place that chooses among
// threads, processes and CUDA devices) and an executor for each rank of this process.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/gpu_process_rank_group.h"
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

// One executor per rank this process runs (null for the others).
std::vector<std::unique_ptr<RankExecutor>> make_executors(const PipelinePlan& plan, const Model& model,
                                                          const ModelStages& stages,
                                                          const ParameterOwnership& ownership,
                                                          OptimizerStep& optimizer) {
  const TrainingConfig& c = plan.config;
  RankExecutor::Options options;
  // A sequence-parallel stage's output is already this member's 1/T (its steps): sent as it is.
  const auto& group = model.tensor_parallel_group();
  if (group != nullptr && !group->sequence_parallel()) options.tensor_parallel = group;
  options.timeout_seconds = c.recv_timeout_seconds;
  options.posted_receives = plan.comm == sched::CommSemantics::kPosted;
  options.loss_scale = plan.loss_scale;
  options.on_allreduce = optimizer.allreduce_hook();
  std::vector<std::unique_ptr<RankExecutor>> executors;
  for (int r = 0; r < plan.schedule.num_ranks(); ++r) {
    if (!ownership.is_local_rank(r)) {
      executors.push_back(nullptr);
      continue;
    }
    RankInstruments::Options instruments;
    instruments.record_timeline = c.record_timeline;
    if (r == c.slow_rank) instruments.slow_factor = c.slow_factor;
    if (c.bubble_fill) instruments.fill = [fill = c.bubble_fill, r](double seconds) { return fill(r, seconds); };
    // The executor sees its own stages only.
    std::vector<const Stage*> own(stages.stages().size(), nullptr);
    for (const int s : plan.schedule.placement.stages_of(r)) own[static_cast<size_t>(s)] = &stages.stage(s);
    executors.push_back(std::make_unique<RankExecutor>(r, std::move(own), options, std::move(instruments)));
  }
  return executors;
}

std::vector<int> local_ranks(const PipelinePlan& plan, const ParameterOwnership& ownership) {
  std::vector<int> ranks;
  for (int r = 0; r < plan.schedule.num_ranks(); ++r)
    if (ownership.is_local_rank(r)) ranks.push_back(r);
  return ranks;
}

std::unique_ptr<comm::RankGroup> make_rank_group(const PipelinePlan& plan) {
  const TrainingConfig& c = plan.config;
  comm::InProcessTransport::Options options;
  options.mailbox_capacity = c.mailbox_capacity;
  options.spin_seconds = c.spin_seconds;
  switch (plan.placement) {
    case RankPlacement::kProcesses:
      if (!plan.rank_device.empty())  // one GPU per process: NCCL between them, set up over the world
        return std::make_unique<comm::GpuProcessRankGroup>(
            c.world, c.data_parallel_world,
            cuda_backend().new_process_gpu_transport(c.world, plan.rank_device[static_cast<size_t>(c.world->rank())],
                                                     talking_pairs(plan.schedule), c.mailbox_capacity,
                                                     std::max(300.0, c.recv_timeout_seconds)));
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
