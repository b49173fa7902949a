// Fail-slow adaptation (ResiHP, docs/PLANNING.md "Adapting to a slow rank"): a pipelined trainer
// whose step compares each rank's measured busy time with what the partition predicts; a rank
// persistently slower than the others by a factor triggers a new partition for the measured
// speeds, and the trainer moves to it live: parameters, optimizer state and progress go in memory
// (between processes over the world) into a new PipelineTrainer over the same model, without a
// restart (repartition.h). The arithmetic does not depend on the partition, so training stays
// bitwise equal to the sequential trainer across the move.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/run/resolve.h"
#include "runtime/planner/model_profile.h"
#include "runtime/train/trainer.h"

namespace pf::plan {

struct FailSlowOptions {
  double threshold = 1.5;  // a rank this much slower than the fastest (each against its prediction)
  int patience = 3;        // for this many steps in a row triggers a re-partition
};

// Per step: measured busy time per rank against the predicted; says when a rank is fail-slow.
class FailSlowDetector {
 public:
  FailSlowDetector(std::vector<double> predicted_busy, FailSlowOptions options);
  // Feeds one step's measured busy time per rank; true when some rank has been at least
  // `threshold` times slower than the fastest for `patience` steps in a row.
  bool observe(const std::vector<double>& measured_busy);
  // Per rank, the last step's measured / predicted over the fastest rank's (1 for the fastest).
  const std::vector<double>& slowdown() const { return slowdown_; }

 private:
  std::vector<double> predicted_;
  FailSlowOptions options_;
  std::vector<double> slowdown_;
  int streak_ = 0;
};

// Per rank: the F + B + W time its stages take for one step of `micro_batches`, from `costs` and
// the partition `layers_per_stage` of `schedule` (one pipeline).
std::vector<double> predicted_busy_per_rank(const MicroBatchCosts& costs, const sched::Schedule& schedule,
                                            const std::vector<int>& layers_per_stage);

// The partition that minimises the slowest stage when each rank r runs `slowdown[r]` times slower.
std::vector<int> partition_for_slowdown(const MicroBatchCosts& costs, const sched::Schedule& schedule,
                                        const std::vector<double>& slowdown);

struct Adaptation {
  int64_t step = 0;                   // the steps taken when it moved
  std::vector<double> slowdown;       // per rank, what triggered it
  std::vector<int> from, to;          // layers per stage
};

// {"step": 4, "slowdown": [1, 2.9], "from": [5, 4], "to": [6, 3]}: what `pipeforge train --json`,
// its metrics log and pf_trainer_adaptations_json report.
nlohmann::json adaptation_to_json(const Adaptation& adaptation);
nlohmann::json adaptations_to_json(const std::vector<Adaptation>& adaptations);
// The metrics-log fields of `step` (TrainingLoopOptions::log_fields): {"adaptation": {...}} when
// the adaptive trainer moved in that step, else null.
nlohmann::json adaptation_log_fields(const std::vector<Adaptation>& adaptations, int64_t step);

// A PipelineTrainer that re-partitions itself when a rank turns fail-slow (one pipeline,
// synchronous schedules; ranks as threads, or one process per rank with options.world and no
// data-parallel replicas). `costs`: the profile at its micro-batch rows. Moves go in memory
// (repartition.h). The step that finds a rank slow records the Adaptation; the move happens at the start of the next step, so that after any step
// pipeline() is the trainer that ran it (its stats and timeline) and layers_per_stage() the
// partition it ran.
//
// One process per rank: every process constructs it with the same options and steps it on the
// same data; rank 0's `costs` are broadcast and used by every process (measurements differ). The
// detector reads last_stats().ranks, which the pipeline gathers over the world every step, so
// every process feeds it the same bits and decides the same move at the same step; the decision
// is all-gathered and compared each step (a disagreement is kInternal naming the ranks, never a
// hang). A failed move (a peer died, a timeout) throws the Error naming the rank and the
// parameter, and every later step throws kFailedPrecondition.
class AdaptiveTrainer : public Trainer {
 public:
  AdaptiveTrainer(std::shared_ptr<Model> model, TrainingConfig options, MicroBatchCosts costs,
                  FailSlowOptions fail_slow);
  // The fail-slow options from the config's adaptation; the profile is measured at the first step,
  // on a copy of the model and the step's first micro-batch (under a world, rank 0's is used).
  AdaptiveTrainer(std::shared_ptr<Model> model, TrainingConfig options);
  // From a plan whose config asks for adaptation (make_trainer's), with the profile at the run's
  // micro-batch rows or, without one, measured at the first step.
  AdaptiveTrainer(std::shared_ptr<Model> model, PipelinePlan plan, std::optional<MicroBatchCosts> costs = std::nullopt);

  StepResult step(const Batch& batch) override;
  // (The first step profiles first when no profile was given.)
  StepResult step(DataSource& source) override;
  EvalResult evaluate(DataSource& source, int micro_batches) override { return trainer_->evaluate(source, micro_batches); }
  Model& model() const override { return trainer_->model(); }
  Optimizer& optimizer() const override { return trainer_->optimizer(); }
  const TrainerMetrics& metrics() const override { return trainer_->metrics(); }
  void restore_progress(int64_t step, int64_t data_position) override { trainer_->restore_progress(step, data_position); }
  // The pipeline it runs now answers (its processes hold the parameters of their stages).
  ProcessGroups process_groups() const override { return trainer_->process_groups(); }
  std::vector<Parameter*> local_parameters() const override { return trainer_->local_parameters(); }
  CheckpointRefusal checkpoint_refusal(bool loading) const override { return trainer_->checkpoint_refusal(loading); }

  // The end of training: a move decided after the last step is made now, so that the partition
  // is the last adaptation's (a move changes no parameter); then the pipeline drains.
  void drain() override;
  exec::PipelineTrainer& pipeline() const { return *trainer_; }
  const std::vector<Adaptation>& adaptations() const { return adaptations_; }
  std::vector<int> layers_per_stage() const;

 private:
  void check_usable() const;  // kFailedPrecondition after a failed move
  StepResult after_step(StepResult result);
  // Processes: every process's decision (`to`; empty: none) equals this one's.
  void check_same_decision(const std::vector<int>& to) const;
  void move_if_decided();
  void move_to(const std::vector<int>& layers_per_stage);
  void watch();
  void start(MicroBatchCosts costs);   // takes the profile (rank 0's under a world) and starts watching
  void profile(const Batch& micro_batch);  // the first step of a trainer built without a profile

  std::shared_ptr<Model> model_;
  TrainingConfig options_;
  bool profiled_ = false;
  MicroBatchCosts costs_;
  FailSlowOptions fail_slow_;
  std::string move_failure_;  // why the last move failed ("" while none did)
  std::unique_ptr<exec::PipelineTrainer> trainer_;
  std::unique_ptr<FailSlowDetector> detector_;
  std::vector<double> known_slowdown_;  // per rank, what the current partition was made for
  std::vector<Adaptation> adaptations_;
  std::vector<int> decided_;  // the partition the next step moves to, or empty
};

}  // namespace pf::plan
