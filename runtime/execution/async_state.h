// What a windowed schedule (asynchronous or local learning; ScheduleTraits::windowed) keeps across
// steps: each stage's weight versions and optimizer (StageWeights), local learning's auxiliary
// heads, and whether a step failed with micro-batches in flight. The trainer's optimizer() mirrors
// the stages' optimizer state while the pipeline is empty, which checkpoints save; a loaded
// checkpoint goes back to the stages before the next step. Inert for synchronous schedules.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/execution/model_stages.h"
#include "runtime/execution/parameter_ownership.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/execution/weight_versions.h"
#include "runtime/optim/optimizer.h"
#include "runtime/run/resolve.h"

namespace pf::exec {

class AsyncState {
 public:
  // Builds the heads and stage weights of this process's stages and hands them to `executors`
  // ([rank], null for other processes), which must outlive this; `optimizer` mirrors the stages'.
  AsyncState(const PipelinePlan& plan, const Model& model, const ModelStages& stages,
             const ParameterOwnership& ownership, const std::vector<std::unique_ptr<RankExecutor>>& executors,
             Optimizer& optimizer);

  bool windowed() const { return plan_->schedule.traits.windowed(); }
  // The auxiliary head of a stage of this process (local learning; nullptr otherwise and for the
  // last stage): a one-stage model of the head's layers with the model's loss.
  const Model* local_head(int stage) const;
  // The weight versions of a stage of this process (nullptr for synchronous schedules).
  const StageWeights* stage_weights(int stage) const;
  // Steps run since the pipeline was last empty (0: nothing in flight).
  int64_t steps_since_fill() const;
  bool pipeline_empty() const { return steps_since_fill() == 0; }
  // "" when a checkpoint can be saved or loaded now, else why not (micro-batches in flight).
  std::string in_flight_refusal() const;

  // kFailedPrecondition after a step failed with micro-batches in flight.
  void check_usable() const;
  void mark_failed() { failed_ = true; }
  // Before a step: a loaded checkpoint's optimizer state goes to the stages.
  void before_step();
  // After a drain: optimizer() shows the stages' state again.
  void after_drain() { mirror_stage_optimizers(); }
  // restore_progress ran: optimizer() holds a checkpoint's state.
  void checkpoint_loaded() { loaded_ = windowed(); }

 private:
  void make_local_heads(const Model& model, const ModelStages& stages, const ParameterOwnership& ownership);
  void mirror_stage_optimizers();

  const PipelinePlan* plan_;
  const ModelStages* stages_;
  const std::vector<std::unique_ptr<RankExecutor>>* executors_;
  Optimizer* optimizer_;
  std::vector<std::unique_ptr<Model>> heads_;                 // [stage]: this process's heads
  std::vector<Stage> head_stages_;                            // one per head
  std::vector<std::unique_ptr<StageWeights>> stage_weights_;  // [stage]; null for other processes' stages
  bool failed_ = false;
  bool loaded_ = false;
};

}  // namespace pf::exec
