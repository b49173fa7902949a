// Pipelined training: the ranks of a schedule (docs/SCHEDULES.md) run their action lists over the
// model's stages — as threads of this process, on CUDA devices, or one process per rank — passing
// activations and gradients through their rank group. For every synchronous schedule whose stages
// accumulate weight gradients in micro-batch order (all built-ins), the parameters after each step
// are bitwise equal to SequentialTrainer's with the same seed, data and options.
//
// The trainer is a facade over parts that own their state and read one PipelinePlan (resolve.h):
// the model's stages (model_stages.h), parameter ownership (parameter_ownership.h), the ranks'
// devices (rank_devices.h), the rank group (runtime/comm/rank_group.h), the worker threads
// (worker_pool.h), activation memory (activation_memory.h), the optimizer step (optimizer_step.h),
// the state of windowed schedules (async_state.h) and the step report (step_report.h). See
// docs/ARCHITECTURE.md and docs/EXECUTION.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/rank_group.h"
#include "runtime/execution/activation_memory.h"
#include "runtime/execution/async_state.h"
#include "runtime/execution/model_stages.h"
#include "runtime/execution/optimizer_step.h"
#include "runtime/execution/parameter_ownership.h"
#include "runtime/execution/tied_gradients.h"
#include "runtime/execution/rank_devices.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/execution/step_overlap.h"
#include "runtime/execution/step_report.h"
#include "runtime/execution/worker_pool.h"
#include "runtime/run/resolve.h"
#include "runtime/run/training_config.h"
#include "runtime/train/trainer.h"

namespace pf::exec {

using comm::GpuTransportGroup;
using AsyncOptions = pf::AsyncOptions;

// A TrainingConfig whose schedule defaults to 1f1b: how the tests and benchmarks that build a
// PipelineTrainer directly have always written it.
struct PipelineOptions : TrainingConfig {
  PipelineOptions() { schedule = "1f1b"; }
  void validate() const { check_config_fields(*this); }  // kInvalidArgument naming the field
};

// Read-only views of the trainer's parts, for callers that inspect them (tests, the C API).
struct PipelineParts {
  const std::shared_ptr<Model>& model;  // shared with the trainer (a repartition builds another over it)
  const ModelStages& stages;
  const ParameterOwnership& ownership;
  const RankDevices& devices;
  const comm::RankGroup& group;
  const ActivationMemory& memory;
  const OptimizerStep& optimizer;
  const AsyncState& async;
};

class PipelineTrainer : public Trainer {
 public:
  // resolve(*model, config), then the parts; initialises the parameters from config.base.seed as
  // SequentialTrainer does. Every process of a world constructs it with the same config.
  PipelineTrainer(std::shared_ptr<Model> model, const TrainingConfig& config);
  PipelineTrainer(std::shared_ptr<Model> model, PipelinePlan plan);
  ~PipelineTrainer() override;
  PipelineTrainer(const PipelineTrainer&) = delete;
  PipelineTrainer& operator=(const PipelineTrainer&) = delete;

  // One step on a whole batch split into D x m equal micro-batches (this process runs its
  // replica's m), or on micro-batches pulled from `source` (rewound to where the step began on
  // failure). Windowed schedules: micro-batches in flight go on in the next step.
  StepResult step(const Batch& batch) override;
  StepResult step(DataSource& source) override;
  // Forward-only through the same ranks (sched::forward_only_schedule of the placement);
  // synchronous schedules only. With a world every process calls it with the same data.
  EvalResult evaluate(DataSource& source, int micro_batches) override;
  Model& model() const override { return *model_; }
  Optimizer& optimizer() const override { return optimizer_.optimizer(); }
  const TrainerMetrics& metrics() const override { return report_.metrics(); }
  void restore_progress(int64_t step, int64_t data_position) override;
  ProcessGroups process_groups() const override;
  std::vector<Parameter*> local_parameters() const override { return ownership_.local(); }
  CheckpointRefusal checkpoint_refusal(bool loading) const override;

  // The plan it runs (its config: options(); the schedule's traits: plan().schedule.traits).
  const PipelinePlan& plan() const { return plan_; }
  const TrainingConfig& options() const { return plan_.config; }
  // The executed (lowered) schedule: the plan's, or the one a measured activation policy planned.
  const sched::Schedule& schedule() const { return memory_.schedule(); }
  const PipelineStats& last_stats() const { return report_.stats(); }
  // Start/end of every action of the last step (time_unit "us", 0 = step start).
  const sched::Timeline& last_timeline() const { return report_.timeline(); }
  PipelineParts parts() const;
  // Windowed schedules: runs the backwards and updates still in flight, so that every stage has
  // applied every micro-batch it was given (a no-op otherwise). last_stats() describes the drain.
  void drain() override;
  // Overlapping steps (overlap_steps): how many step(source) calls follow back to back.
  void expect_steps(int64_t steps) override;
  // Overlapping steps: how many times a rank of this process began a step while an earlier one
  // was still unfinished on another rank (0 without overlap_steps).
  int64_t steps_begun_early() const { return overlap_ ? overlap_->begun_early() : 0; }
  // Overlapping steps with clipping: updates redone because the norm called for clipping (or was
  // not finite) after the ranks had updated optimistically.
  int64_t rollbacks() const { return rollbacks_; }
  // SHA-256 of every parameter in model order, a split one's whole tensor (the same at any T); with
  // a world or tensor parallelism a collective call.
  std::string parameter_checksum() const;
  // Changes the receive timeout for later steps (> 0).
  void set_recv_timeout_seconds(double seconds);
  // Measures each stage's activation bytes on `micro_batch` and plans a measured policy (runs by
  // itself before the first step; call it earlier to refuse a budget before training).
  void plan_activation_memory(const Batch& micro_batch);

 private:
  struct Step;
  StepResult run_step(const std::vector<Batch>& step_micro_batches);
  // The workers' part of a training step and what must finish with it (data-parallel reductions,
  // activation copies): each rank's store statistics; a failure is rethrown.
  std::vector<mem::StoreStats> run_pipeline(Step& step);
  // The step's loss, gradient norm, clipping and update.
  StepResult finish_step(Step& step, int units, int64_t window);
  // Runs `job` on every local rank's worker (under its device scope); a failure resets the group.
  std::exception_ptr run_workers(const std::function<void(int rank)>& job);
  void worker_step(int rank, Step& step);
  double finish_loss(const std::vector<float>& losses, int64_t window, int units) const;
  [[noreturn]] void fail_step(std::exception_ptr error);
  // Overlapping steps (pipeline_trainer_overlap.cc).
  bool overlaps() const { return overlap_ != nullptr; }
  StepResult overlapped_step(DataSource& source);  // run_overlapped_step; a failure ends the run
  StepResult run_overlapped_step(DataSource& source);
  std::unique_ptr<StepOverlap::Step> pull_overlapped_step(DataSource& source, int64_t number);
  void overlapped_worker(int rank, int64_t first);
  // Starts a run of overlapped steps on the workers with `first`.
  void start_run(std::unique_ptr<StepOverlap::Step> first);
  // Ends the run on the workers: a step begun ahead is abandoned — threads at once (the group is
  // cancelled and reset), processes after its actions, so that every message of it is received.
  // Returns a failure of processes (threads: the cancellation asked for is no failure).
  std::exception_ptr stop_run();
  // Ends a run of overlapped steps: a step begun ahead is abandoned and, with `rewind`, its
  // micro-batches go back to the source; a failure is rethrown.
  void settle(bool rewind = true);
  // Post-validation: the step's global norm says its optimistic update must change (clipping
  // applies, or the norm is not finite): every rank restores and updates again with `scale`; a
  // step begun ahead on the optimistic weights runs again.
  void roll_back(float scale);
  // A run stopped by a failure: every wait ends, the source goes back to the failed step's start.
  [[noreturn]] void fail_overlapped_run();

  PipelinePlan plan_;
  std::shared_ptr<Model> model_;
  ModelStages stages_;
  ParameterOwnership ownership_;
  OptimizerStep optimizer_;
  TiedGradients tied_;
  std::unique_ptr<RankDevices> devices_;
  std::unique_ptr<comm::RankGroup> group_;
  std::vector<std::unique_ptr<RankExecutor>> executors_;  // per rank; null for ranks of other processes
  ActivationMemory memory_;
  AsyncState async_;
  StepReport report_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<StepOverlap> overlap_;  // overlap_steps: the steps in flight
  int64_t expected_steps_ = 0;            // expect_steps()
  DataSource* overlap_source_ = nullptr;  // where the steps in flight came from
  std::string unusable_;                  // why no step can run after a failed overlapped one
  int64_t rollbacks_ = 0;
};

// rank_setup.cc: the rank group a plan's ranks use (threads, processes, or CUDA devices with NCCL
// between devices); one executor per rank this process runs (null for the others), each seeing its
// own stages only; and those ranks.
std::unique_ptr<comm::RankGroup> make_rank_group(const PipelinePlan& plan);
std::vector<std::unique_ptr<RankExecutor>> make_executors(const PipelinePlan& plan, const Model& model,
                                                          const ModelStages& stages,
                                                          const ParameterOwnership& ownership,
                                                          OptimizerStep& optimizer);
std::vector<int> local_ranks(const PipelinePlan& plan, const ParameterOwnership& ownership);

}  // namespace pf::exec
