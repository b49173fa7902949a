#include "runtime/train/sequential_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/core/log.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/init.h"
#include "runtime/train/micro_batches.h"

namespace pf {
namespace {

void zero_gradients(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) {
    if (p->grad.device().kind == DeviceKind::kCpu) {
      std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
    } else {
      zero_bytes(p->grad.data<char>(), p->grad.device(), p->grad.nbytes(), "trainer: zeroing gradients");
    }
  }
}

// The micro-batch's inputs and targets on `device` (copies charged to activations).
std::pair<Tensor, Tensor> on_device(const Batch& batch, const Device& device) {
  MemoryCategoryScope scope(MemoryCategory::kActivations);
  return {batch.inputs.device() == device ? batch.inputs : batch.inputs.to_device(device),
          batch.targets.device() == device ? batch.targets : batch.targets.to_device(device)};
}

// One stage: every layer and the loss.
Stage whole_model(const std::shared_ptr<Model>& model) {
  PF_CHECK_ARG(model != nullptr, "trainer: model is null");
  return Stage(*model, 0, 1, 0, static_cast<int>(model->layers().size()));
}

}  // namespace

SequentialTrainer::SequentialTrainer(std::shared_ptr<Model> model, const TrainerOptions& options)
    : model_(std::move(model)),
      options_(options),
      stage_(whole_model(model_)) {
  options_.validate();
  optimizer_ = make_optimizer(options_.optimizer);
  initialize_parameters(model_->parameters(), options_.seed);
}

SequentialTrainer::SequentialTrainer(std::shared_ptr<Model> model, const TrainerOptions& options,
                                     const Device& device)
    : SequentialTrainer(std::move(model), options) {
  if (device.kind == DeviceKind::kCuda) require_cuda_device(device.ordinal, "trainer device");
  model_->to_device(device);
}

StepResult SequentialTrainer::step(const Batch& batch) {
  return run_step(split_into_micro_batches(*model_, batch, options_.step_micro_batches()));
}

StepResult SequentialTrainer::step(DataSource& source) {
  const StepResult r = step_on_source(*model_, source, options_.step_micro_batches(),
                                      [&](const std::vector<Batch>& micro) { return run_step(micro); });
  metrics_.data_position = source.position();
  return r;
}

StepResult SequentialTrainer::run_step(const std::vector<Batch>& micro_batches) {
  const auto start = std::chrono::steady_clock::now();
  cpu::set_blas_threads_for_this_thread(options_.blas_threads);
  const auto& params = model_->parameters();
  const Device& device = model_->device();
  const int m = static_cast<int>(micro_batches.size());
  const int replicas = options_.replicas;
  PF_CHECK_ARG(replicas == 1 || device.kind == DeviceKind::kCpu, "trainer: replicas > 1 runs on the CPU only");
  const int per_replica = m / replicas;
  const float scale = 1.0f / static_cast<float>(m);
  StepResult result;
  int64_t peak_bytes = 0;  // of one micro-batch's contexts: they are the only ones alive
  std::vector<Tensor> replica_sum;  // replicas > 1: the gradients of the replicas so far
  for (int d = 0; d < replicas; ++d) {
    zero_gradients(params);
    for (int mb = d * per_replica; mb < (d + 1) * per_replica; ++mb) {
      const Batch& batch = micro_batches[mb];
      std::vector<SavedContext> contexts;
      SavedContext loss_context;
      auto [x, targets] = on_device(batch, device);
      x = stage_.forward(std::move(x), contexts);
      result.loss += stage_.loss_forward(x, targets, scale, loss_context);
      peak_bytes = std::max(peak_bytes, static_cast<int64_t>(context_bytes(contexts, &loss_context)));
      stage_.backward(contexts, stage_.loss_backward(loss_context));
      result.samples += batch.rows();
      result.tokens += batch.targets.numel();
    }
    if (replicas == 1) break;
    MemoryCategoryScope scope(MemoryCategory::kGradients);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& g = params[i]->grad;
      if (d == 0) replica_sum.push_back(g.clone());
      else add_replica_gradient(replica_sum[i].f32(), g.f32(), g.numel());
    }
  }
  for (size_t i = 0; i < replica_sum.size(); ++i) params[i]->grad.copy_from(replica_sum[i]);
  sum_tied_gradients(model_->tied_pairs());
  result.grad_norm = clip_gradients(params, options_.optimizer.clip_norm, model_->tensor_parallel_group().get());
  result.lr = options_.lr_at(metrics_.step);
  optimizer_->set_lr(static_cast<float>(result.lr));
  optimizer_->step(params);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_activation_bytes = {peak_bytes};

  metrics_.step += 1;
  metrics_.last_loss = result.loss;
  metrics_.last_grad_norm = result.grad_norm;
  metrics_.tokens_per_second = result.seconds > 0 ? result.tokens / result.seconds : 0.0;
  metrics_.total_tokens += result.tokens;
  if (log_enabled(LogLevel::kDebug)) {
    log(LogLevel::kDebug, "step " + std::to_string(metrics_.step) + ": loss " + std::to_string(result.loss) +
                              ", grad norm " + std::to_string(result.grad_norm) + ", " +
                              std::to_string(result.seconds * 1e3) + " ms");
  }
  return result;
}

EvalResult SequentialTrainer::evaluate(DataSource& source, int micro_batches) {
  PF_CHECK_ARG(micro_batches >= 1, "evaluate: micro_batches must be >= 1, got ", micro_batches);
  const std::vector<Batch> micro = pull_micro_batches(*model_, source, micro_batches);
  cpu::set_blas_threads_for_this_thread(options_.blas_threads);
  const Device& device = model_->device();
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (const Batch& batch : micro) {
    std::vector<SavedContext> contexts;
    SavedContext loss_context;
    auto [x, targets] = on_device(batch, device);
    x = stage_.forward(std::move(x), contexts);
    loss_sum += stage_.loss_forward(x, targets, 1.0f, loss_context);
    correct += stage_.count_correct(x, targets);
  }
  return eval_result(micro, loss_sum, correct);
}

void SequentialTrainer::restore_progress(int64_t step, int64_t data_position) {
  metrics_.step = step;
  metrics_.data_position = data_position;
  optimizer_->set_steps_taken(step);
}

}  // namespace pf
