// The reference trainer: one device, m micro-batches per step run one after another (forward, loss,
// fused backward), gradients accumulated in micro-batch order, one optimizer step. Every
// synchronous pipeline schedule must reproduce its parameters bitwise.
#pragma once

#include <memory>
#include <string>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/batch.h"
#include "runtime/train/stage.h"
#include "runtime/train/trainer.h"

namespace pf {

class SequentialTrainer : public Trainer {
 public:
  // Initialises the model's parameters from options.seed. The trainer computes on the model's
  // device (Model::to_device, before or after construction) and moves each micro-batch there.
  SequentialTrainer(std::shared_ptr<Model> model, const TrainerOptions& options);
  // The same, then moves the model to `device` (e.g. Device::cuda(0)).
  SequentialTrainer(std::shared_ptr<Model> model, const TrainerOptions& options, const Device& device);

  // One step on a whole batch split into options.micro_batches equal micro-batches.
  StepResult step(const Batch& batch) override;
  // One step on micro-batches pulled from `source`.
  StepResult step(DataSource& source) override;
  EvalResult evaluate(DataSource& source, int micro_batches) override;

  Model& model() const override { return *model_; }
  std::shared_ptr<Model> shared_model() const { return model_; }
  Optimizer& optimizer() const override { return *optimizer_; }
  const TrainerOptions& options() const { return options_; }
  const TrainerMetrics& metrics() const override { return metrics_; }
  // Restores step and data position (used by checkpoint loading).
  void restore_progress(int64_t step, int64_t data_position) override;

 private:
  StepResult run_step(const std::vector<Batch>& micro_batches);

  std::shared_ptr<Model> model_;
  TrainerOptions options_;
  Stage stage_;  // every layer and the loss
  std::unique_ptr<Optimizer> optimizer_;
  TrainerMetrics metrics_;
};

}  // namespace pf
