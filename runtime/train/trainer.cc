#include "runtime/train/trainer.h"

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

}  // namespace pf
