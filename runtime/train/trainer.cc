#include "runtime/train/trainer.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf {

void TrainerOptions::validate() const {
  PF_CHECK_ARG(micro_batches >= 1 && micro_batches <= limits::kMaxMicroBatches, "micro_batches must be in [1, ",
               limits::kMaxMicroBatches, "], got ", micro_batches);
  PF_CHECK_ARG(replicas >= 1 && replicas <= limits::kMaxRanks, "replicas must be in [1, ", limits::kMaxRanks,
               "], got ", replicas);
  PF_CHECK_ARG(static_cast<int64_t>(micro_batches) * replicas <= limits::kMaxMicroBatches,
               "micro_batches x replicas must be at most ", limits::kMaxMicroBatches, ", got ", micro_batches, " x ",
               replicas);
  PF_CHECK_ARG(blas_threads >= 1 && blas_threads <= 1024, "blas_threads must be in [1, 1024], got ", blas_threads);
  optimizer.validate();
  lr_schedule.validate(optimizer.lr);
}

EvalResult eval_result(const std::vector<Batch>& micro_batches, double loss_sum, int64_t correct) {
  EvalResult r;
  for (const Batch& b : micro_batches) {
    r.samples += b.rows();
    r.targets += b.targets.numel();
  }
  r.micro_batches = static_cast<int64_t>(micro_batches.size());
  r.loss = micro_batches.empty() ? 0.0 : loss_sum / static_cast<double>(micro_batches.size());
  r.accuracy = r.targets > 0 ? static_cast<double>(correct) / static_cast<double>(r.targets) : 0.0;
  return r;
}

const nlohmann::json& Trainer::run_description() const {
  static const nlohmann::json none;
  return run_description_ ? *run_description_ : none;
}

void Trainer::set_run_description(const nlohmann::json& description) {
  run_description_ = description.is_null() ? nullptr : std::make_shared<const nlohmann::json>(description);
}

}  // namespace pf
