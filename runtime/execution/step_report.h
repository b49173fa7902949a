// What a pipeline step reports: the per-micro-batch losses from the ranks of the last stages (with
// one process per rank, broadcast to every process, every replica's gathered), each rank's
// statistics and the measured timeline (gathered over the processes), the trainer's metrics, and
// the next step's bubble-fill budgets from this step's timeline.
#pragma once

#include <memory>
#include <vector>

#include "runtime/execution/rank_executor.h"
#include "runtime/memory/activation_store.h"
#include "runtime/run/resolve.h"
#include "runtime/schedules/timeline.h"
#include "runtime/train/trainer.h"

namespace pf::exec {

struct PipelineStats {
  double makespan_us = 0;     // latest action end
  double step_us = 0;         // the whole step (data split, workers, clipping, optimizer)
  // Clipping + optimizer step as the main thread waits for them: with optimizer_on_workers, the
  // workers' parallel scale-and-step phase (their squared norms overlap the pipeline's tail and
  // count in RankStats::optimizer_us only).
  double optimizer_us = 0;
  bool optimizer_on_workers = false;  // OptimizerStep::on_workers() for this step
  double bubble_rate = 0;     // (makespan - max busy) / makespan; overlapping steps: the step's wall time for makespan
  size_t offloaded_bytes = 0; // sum over ranks of RankStats::offloaded_bytes
  std::vector<RankStats> ranks;
};

class StepReport {
 public:
  explicit StepReport(const PipelinePlan& plan) : plan_(&plan) {}
  // The step's `units` losses (0 for units no last stage ran), on every process.
  std::vector<float> losses(const std::vector<RankExecutor::StepOutput>& outputs, const sched::Schedule& schedule,
                            int units) const;
  // Evaluation: the last stage's unscaled losses and correct counts of `micro_batches`, on every process.
  void evaluation(const std::vector<RankExecutor::StepOutput>& outputs, int last_rank, int micro_batches,
                  std::vector<float>* losses, std::vector<int64_t>* correct) const;
  // Per-rank statistics and the timeline of the step that just ran (takes the outputs' timings).
  // `period_us` > 0: steps overlap (overlap_steps), so idle time and the bubble rate are measured
  // against the step's wall time (its share of the run) instead of its makespan.
  void collect(std::vector<RankExecutor::StepOutput>& outputs, const std::vector<mem::StoreStats>& store_stats,
               double period_us = 0);
  // The step's totals, and the metrics after it.
  void finish(const StepResult& result, double step_us, double optimizer_us, bool optimizer_on_workers);
  // Bubble filling: each executor's budgets for the next step from this step's timeline.
  void plan_bubble_fill(const std::vector<std::unique_ptr<RankExecutor>>& executors) const;

  const PipelineStats& stats() const { return stats_; }
  const sched::Timeline& timeline() const { return timeline_; }
  TrainerMetrics& metrics() { return metrics_; }
  const TrainerMetrics& metrics() const { return metrics_; }

 private:
  void broadcast_losses(std::vector<float>* losses, const sched::Schedule& schedule) const;

  double timeout() const { return plan_->config.recv_timeout_seconds; }

  const PipelinePlan* plan_;
  PipelineStats stats_;
  sched::Timeline timeline_;
  TrainerMetrics metrics_;
};

}  // namespace pf::exec
