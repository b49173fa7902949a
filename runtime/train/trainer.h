// What every trainer offers: the sequential reference and the pipelined executor implement it, so
// checkpoints, the C API and the command line work with either.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/backend/cuda_backend.h"
#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/batch.h"
#include "runtime/train/lr_schedule.h"

namespace pf {
namespace comm {
class World;
}  // namespace comm

struct TrainerOptions {
  int micro_batches = 1;   // m: per replica
  // D data-parallel replicas (docs/EXECUTION.md, "Data parallel"): a step takes D * m
  // micro-batches, replica d gets micro-batches [d*m, (d+1)*m), every micro-batch's loss is scaled
  // by 1/(D*m). SequentialTrainer reproduces the deterministic reduction: each replica's
  // micro-batches accumulate from zero gradients and the replicas' gradients are added in replica
  // order (add_replica_gradient). PipelineTrainer runs one replica per pipeline group.
  int replicas = 1;
  uint64_t seed = 0;       // parameter initialisation
  int blas_threads = 1;    // BLAS threads of each thread that runs layers (per worker)
  OptimizerConfig optimizer;
  // The learning rate of each step: optimizer.lr under the schedule (lr_schedule.h). The
  // asynchronous and local-learning schedules take a constant one only.
  LrSchedule lr_schedule;
  void validate() const;   // kInvalidArgument naming the field
  int step_micro_batches() const { return micro_batches * replicas; }  // D * m
  // The learning rate of the step that follows `steps_taken` steps.
  float lr_at(int64_t steps_taken) const { return lr_schedule.lr_at(optimizer.lr, steps_taken); }
};

// The deterministic data-parallel reduction, one replica at a time in replica order:
// sum[i] = sum[i] + replica[i].
inline void add_replica_gradient(float* sum, const float* replica, int64_t n) {
  for (int64_t i = 0; i < n; ++i) sum[i] += replica[i];
}

// Weight tying (Parameter::tied_to), once a step's gradients are final (after the data-parallel
// reduction, as Megatron-LM sums its word-embedding gradients after it) and before the norm: each
// of a pair gets primary + copy. Float addition is commutative, so the side that adds the other's
// gradient to its own gets the same bits either way (exec::TiedGradients across processes).
// On CUDA gradients the same sum (primary + copy, element by element) is the CUDA backend's add.
inline void sum_tied_gradients(const std::vector<std::pair<Parameter*, Parameter*>>& pairs) {
  for (const auto& [primary, copy] : pairs) {
    if (primary->grad.device().kind == DeviceKind::kCuda) {
      const Tensor sum = cuda_backend().add(primary->grad, copy->grad);
      primary->grad.copy_from(sum);
      copy->grad.copy_from(sum);
      continue;
    }
    add_replica_gradient(primary->grad.f32(), copy->grad.f32(), primary->grad.numel());
    copy->grad.copy_from(primary->grad);
  }
}

struct StepResult {
  double loss = 0.0;          // mean loss over the batch (sum of the 1/m-scaled micro-batch losses)
  // The global gradient L2 norm before clipping, computed only when clipping is on
  // (optimizer.clip_norm > 0); 0 with clipping off, where no norm is computed.
  double grad_norm = 0.0;
  int64_t samples = 0;        // rows in the batch
  int64_t tokens = 0;         // target elements in the batch
  double seconds = 0.0;
  double lr = 0.0;            // the learning rate of the step
  double bubble_rate = 0.0;   // pipelines: measured idle share of the step (0 for the sequential trainer)
  // Per rank (one entry for the sequential trainer): the most activation bytes held at once.
  std::vector<int64_t> peak_activation_bytes;
};

// A forward-only pass over held-out data: no gradient, no update, the data position of training
// unchanged.
struct EvalResult {
  double loss = 0.0;          // mean over the micro-batches of their mean loss
  double accuracy = 0.0;      // share of targets whose largest logit is the target
  int64_t micro_batches = 0;
  int64_t samples = 0;        // rows
  int64_t targets = 0;        // target elements (rows x positions for token models)
};

struct TrainerMetrics {
  int64_t step = 0;           // optimizer steps taken
  double last_loss = 0.0;
  double last_grad_norm = 0.0;  // StepResult::grad_norm of the last step (0 with clipping off)
  double tokens_per_second = 0.0;  // of the last step
  int64_t total_tokens = 0;
  int64_t data_position = 0;       // micro-batches taken from the data source
};

// The EvalResult of `micro_batches` whose (unscaled) losses add up to loss_sum and whose
// correct targets number `correct`.
EvalResult eval_result(const std::vector<Batch>& micro_batches, double loss_sum, int64_t correct);

// The processes a trainer's parameters are spread over (one process per pipeline rank), as the
// collective checkpoint code needs them. `pipeline` null: every parameter is in this process.
struct ProcessGroups {
  comm::World* pipeline = nullptr;       // this replica's pipeline ranks (this process is one)
  comm::World* data_parallel = nullptr;  // the replicas of this pipeline rank; null with one replica
  comm::World* tensor_parallel = nullptr;  // the members this rank's stages are split over; null unsplit
  double timeout_seconds = 60.0;         // for the collective calls
  int replicas = 1;
};

// Why a checkpoint cannot be saved or loaded now; code kOk (0) with an empty `why` when it can.
struct CheckpointRefusal {
  int code = 0;     // a pf::ErrorCode
  std::string why;  // "" when nothing refuses
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // One step on a whole batch split into equal micro-batches.
  virtual StepResult step(const Batch& batch) = 0;
  // One step on micro-batches pulled from `source` (rewound to where the step began on failure).
  virtual StepResult step(DataSource& source) = 0;
  // Forward-only over the next `micro_batches` micro-batches of `source` (a held-out split, not
  // the training source; its position moves on), with the trainer's current weights.
  virtual EvalResult evaluate(DataSource& source, int micro_batches) = 0;
  virtual Model& model() const = 0;
  virtual Optimizer& optimizer() const = 0;
  virtual const TrainerMetrics& metrics() const = 0;
  // Restores step and data position (used by checkpoint loading).
  virtual void restore_progress(int64_t step, int64_t data_position) = 0;
  // Trains the micro-batches still in flight (schedules whose pipeline does not drain between
  // steps: asynchronous and local learning), so the parameters hold every micro-batch given; a
  // no-op for the others.
  virtual void drain() {}
  // The next `steps` calls are step(source) on the same source, back to back, with nothing else in
  // between (the training loop says so up to its next evaluation, checkpoint or end). A trainer
  // that overlaps steps (TrainingConfig::overlap_steps) may then begin the next step's work while
  // this one ends; the source must outlive those calls. `steps` <= 1 settles: a step begun ahead is
  // abandoned (nothing it did is kept; its micro-batches go back to the source). Other calls
  // settle by themselves. The default ignores it.
  virtual void expect_steps(int64_t steps) { (void)steps; }
  // Where the parameters live (a wrapper such as the adaptive trainer answers for the trainer it
  // runs now): the default is one process holding every parameter.
  virtual ProcessGroups process_groups() const { return {}; }
  // The parameters this process holds, allocates and steps, in model order.
  virtual std::vector<Parameter*> local_parameters() const { return model().parameters(); }
  // What refuses a checkpoint save (`loading` false) or load now; the default refuses nothing.
  virtual CheckpointRefusal checkpoint_refusal(bool loading) const {
    (void)loading;
    return {};
  }

  // What the front-end ran (the command line's config), saved in the checkpoints' headers as "run"
  // so that resuming can restore it; null for none.
  const nlohmann::json& run_description() const;
  void set_run_description(const nlohmann::json& description);

 private:
  // Held by pointer so that this header needs only json_fwd.hpp (null: none).
  std::shared_ptr<const nlohmann::json> run_description_;
};

}  // namespace pf
