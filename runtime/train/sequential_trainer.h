// The reference trainer: one device, m micro-batches per step run one after another (forward, loss,
// fused backward), gradients accumulated in micro-batch order, one optimizer step. Every
// synchronous pipeline schedule must reproduce its parameters bitwise.
#pragma once

#include <memory>
#include <string>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/batch.h"

namespace pf {

struct TrainerOptions {
  int micro_batches = 1;
  uint64_t seed = 0;       // parameter initialisation
  int blas_threads = 1;    // BLAS threads of the thread that runs the step
  OptimizerConfig optimizer;
  void validate() const;   // kInvalidArgument naming the field
};

struct StepResult {
  double loss = 0.0;          // mean loss over the batch (sum of the 1/m-scaled micro-batch losses)
  double grad_norm = 0.0;     // global gradient norm before clipping
  int64_t samples = 0;        // rows in the batch
  int64_t tokens = 0;         // target elements in the batch
  double seconds = 0.0;
};

struct TrainerMetrics {
  int64_t step = 0;           // optimizer steps taken
  double last_loss = 0.0;
  double last_grad_norm = 0.0;
  double tokens_per_second = 0.0;  // of the last step
  int64_t total_tokens = 0;
  int64_t data_position = 0;       // micro-batches taken from the data source
};

class SequentialTrainer {
 public:
  // Initialises the model's parameters from options.seed.
  SequentialTrainer(std::shared_ptr<Model> model, const TrainerOptions& options);

  // One step on a whole batch split into options.micro_batches equal micro-batches.
  StepResult step(const Batch& batch);
  // One step on micro-batches pulled from `source`.
  StepResult step(DataSource& source);

  Model& model() const { return *model_; }
  std::shared_ptr<Model> shared_model() const { return model_; }
  Optimizer& optimizer() const { return *optimizer_; }
  const TrainerOptions& options() const { return options_; }
  const TrainerMetrics& metrics() const { return metrics_; }
  // Restores step and data position (used by checkpoint loading).
  void restore_progress(int64_t step, int64_t data_position);

 private:
  StepResult run_step(const std::vector<Batch>& micro_batches);

  std::shared_ptr<Model> model_;
  TrainerOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  TrainerMetrics metrics_;
};

}  // namespace pf
