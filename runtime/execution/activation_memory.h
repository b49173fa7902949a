// A pipeline's activation memory (docs/MEMORY.md): the schedule in effect — the plan's, or for a
// measured policy (selective, balance) the one planned from the first micro-batch's per-stage
// context bytes — and each rank's activation store (host, file or peer tier) when the schedule
// offloads. The executors run schedule(); it changes only at plan().
#pragma once

#include <memory>
#include <vector>

#include "runtime/comm/rank_group.h"
#include "runtime/execution/model_stages.h"
#include "runtime/execution/rank_devices.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/memory/activation_store.h"
#include "runtime/run/resolve.h"
#include "runtime/schedules/simulator.h"

namespace pf::exec {

class ActivationMemory {
 public:
  // `executors` ([rank], null for other processes' ranks) are told the schedule in effect now and
  // at every plan(); `group` carries the peer tier's images. All must outlive this.
  ActivationMemory(const PipelinePlan& plan, const std::vector<std::unique_ptr<RankExecutor>>* executors,
                   comm::RankGroup* group);

  const sched::Schedule& schedule() const { return schedule_; }
  sched::ActivationPolicy policy() const { return plan_->policy; }
  // Whether the trainer should call plan() before the first step (a policy other than none, on
  // ranks that can measure every stage: not with one process per rank).
  bool wants_plan() const { return !planned_ && plan_->policy != sched::ActivationPolicy::kNone &&
                                   plan_->placement != RankPlacement::kProcesses; }
  bool planned() const { return planned_; }
  // Measures each stage's context bytes on `micro_batch` (one forward and input-gradient backward
  // through every stage; parameters, gradients and optimizer untouched), and for a measured policy
  // applies it to the schedule. kInvalidArgument for a budget that cannot be met.
  void plan(const Model& model, const ModelStages& stages, RankDevices& devices, const Batch& micro_batch);
  const sched::CostModel& costs() const { return costs_; }
  const std::vector<double>& predicted_peak_bytes() const { return predicted_peak_; }

  // The store of rank `rank` (null when the schedule has no OFFLOAD, or for another process's rank).
  mem::ActivationStore* store(int rank) const;
  // Before a step: every store's statistics from zero.
  void reset_stats();
  // After the workers: waits for every copy (unless the step already failed: `error` set, or set
  // here when a copy failed), drops what the stores hold, and returns each rank's statistics.
  std::vector<mem::StoreStats> finish_step(std::exception_ptr* error);

 private:
  void make_stores();

  const PipelinePlan* plan_;
  const std::vector<std::unique_ptr<RankExecutor>>* executors_;
  comm::RankGroup* group_;
  sched::Schedule schedule_;
  bool planned_ = false;
  sched::CostModel costs_;
  std::vector<double> predicted_peak_;
  std::vector<std::vector<int>> holder_;  // [stage][mb]: rank with its HOLD (balance), else -1
  std::vector<std::unique_ptr<mem::ActivationStore>> stores_;  // per rank; empty without OFFLOADs
};

}  // namespace pf::exec
