// The optimizer side of a pipeline step, in the mode the plan chose (OptimizerMode): the
// optimizers (and the second copy's with two pipelines), the data-parallel gradient reduction the
// ALLREDUCE actions start, the gradient norm and clipping, and the update — on each CPU rank's
// worker, on the main thread, or per process with the norm gathered from every process. Windowed
// schedules update inside their steps (AsyncState); this only reports their rate.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/execution/gradient_reducer.h"
#include "runtime/execution/model_stages.h"
#include "runtime/execution/parameter_ownership.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/optim/optimizer.h"
#include "runtime/run/resolve.h"

namespace pf::exec {

class OptimizerStep {
 public:
  // Makes the optimizers and initialises this process's parameters (both copies) from the seed.
  // `model`: the plan's (its tensor-parallel group, if split, adds the slices' norms over the group).
  OptimizerStep(const Model& model, const PipelinePlan& plan, const ModelStages& stages,
                const ParameterOwnership& ownership);

  Optimizer& optimizer() const { return *optimizer_; }
  // True when each rank's worker clips and steps its own stages' parameters.
  bool on_workers() const { return plan_->optimizer_mode == OptimizerMode::kOnWorkers; }
  // The executors' ALLREDUCE hook (data parallel; empty with one replica).
  std::function<void(int stage)> allreduce_hook();
  void set_timeout_seconds(double seconds);  // of the data-parallel reduction (the plan's for the rest)
  // A checkpoint was loaded into the first copy: the second takes it before the next step.
  void copy_is_stale() { copy_stale_ = stages_->copy() != nullptr; }

  // Before the workers start.
  void begin_step(const Model& model);
  // Worker `rank`, after its actions (its gradients are final): on the workers with clipping on,
  // its parameters' squared gradient norms, which overlap the other ranks' remaining work.
  // Overlapping steps: `step` picks one of two buffers, since a rank may finish the next step's
  // gradients before the main thread has read this one's norms.
  void after_rank_actions(int rank, RankStats& stats, int64_t step = 0);
  // After the workers, before clip(): `params` (this process's) got new gradients since
  // after_rank_actions read their norms (weight tying): their norms are read again.
  void gradients_changed(const std::vector<Parameter*>& params);
  // After the workers: waits for the data-parallel reductions; their failure is returned.
  std::exception_ptr wait_for_reductions();
  // The gradient norm before clipping (0 with clipping off), gradients scaled to the clip. Per
  // process: a collective over the pipeline's processes.
  double clip(const Model& model);
  // Sets the step's learning rate and applies the update; on the workers through `run_on_workers`
  // (which runs a job on every rank's worker and returns the first failure), whose failure is
  // returned. `stats`: [rank], where the workers' optimizer time goes.
  std::exception_ptr apply(double lr, double grad_norm,
                           const std::function<std::exception_ptr(const std::function<void(int)>&)>& run_on_workers,
                           std::vector<RankExecutor::StepOutput>& outputs);

  // Overlapping steps (step_overlap.h): the update runs on each rank's worker when the step is
  // committed, in every placement of CPU ranks. The main thread, before any rank updates for the
  // step: the learning rate and the optimizer's step count and state slots.
  void begin_overlapped_update(double lr);
  // The gradient norm of a step before clipping (0 with clipping off), from the squared norms every
  // rank left when its gradients were final (after_rank_actions; processes: a collective), summed
  // in model order as the barrier sums them. `scale`: what clipping multiplies the gradients by.
  double overlapped_norm(int64_t step, float* scale);
  // Worker `rank`: applies the update with its unclipped gradients and zeroes them for the next
  // step. `keep`: first keeps what the update changes (post-validation, below).
  void update_rank(int rank, bool keep, RankStats& stats);
  // Post-validation: worker `rank` restores what update_rank(keep) kept — its parameters, their
  // optimizer state and gradients — and updates again with the gradients scaled by `scale`: the
  // bits of an update that had waited for the norm.
  void redo_update(int rank, float scale);

 private:
  void sync_copy(const Model& model);  // the second copy and its optimizer state <- the first's
  double gathered_norm(const Model& model);  // per process: every parameter's squared norm from its owner
  // Per process: `partial` ([model parameter index]) holds this process's parameters' squared
  // norms; each entry is replaced by its owner's (a split parameter's: summed over its
  // tensor-parallel group), and the global norm returned.
  double gathered_norm(std::vector<double> partial);
  // Worker `rank`'s parameters: gradients scaled by `scale`, the update, gradients zeroed.
  void step_rank(const std::vector<Parameter*>& params, float scale);

  const PipelinePlan* plan_;
  const ModelStages* stages_;
  const ParameterOwnership* ownership_;
  const Model* model_;
  std::unique_ptr<Optimizer> optimizer_, copy_optimizer_;
  std::unique_ptr<GradientReducer> reducer_;
  bool copy_stale_ = false;
  float clip_scale_ = 1.0f;             // on the workers: the scale of the update phase
  std::vector<double> squared_norms_;   // on the workers: [model parameter index]
  // Post-validation: per rank, copies of its parameters' values, gradients and optimizer state
  // before its last update (reused from step to step).
  struct Kept {
    std::vector<Tensor> values, grads, state;
    std::vector<Tensor*> state_slots;  // the optimizer's, in the order of `state`
  };
  std::vector<Kept> kept_;
};

}  // namespace pf::exec
