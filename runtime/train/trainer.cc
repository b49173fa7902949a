#include "runtime/train/trainer.h"

#include "runtime/core/error.h"

namespace pf {

void TrainerOptions::validate() const {
  PF_CHECK_ARG(micro_batches >= 1, "micro_batches must be >= 1, got ", micro_batches);
  PF_CHECK_ARG(blas_threads >= 1, "blas_threads must be >= 1, got ", blas_threads);
  optimizer.validate();
}

}  // namespace pf
