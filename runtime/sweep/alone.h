// One model of a sweep trained alone, the way it would be without packing: the library's MLP
// (build_mlp) and sequential trainer, one step per batch of the sweep, on the same batches. What
// `pipeforge sweep --check-alone` and bench/sweep compare the packed sweep with: its held-out
// results (equal up to fp32 summation order) and its time (the speed-up).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/sweep/sweep.h"

namespace pf::sweep {

struct AloneRun {
  int64_t index = 0;              // in SweepSpec::models() order
  double held_out_loss = 0;       // NaN without held-out rows
  double held_out_accuracy = 0;   // NaN without held-out rows
  double train_seconds = 0;       // building, initialising and training (not evaluating)
};

// Trains model `index` of spec's grid alone on the calling thread (BLAS on one thread). The
// library's MLP has relu and gelu: other activations are kInvalidArgument.
AloneRun train_alone(const SweepSpec& spec, std::shared_ptr<const SweepData> data, int64_t index);

}  // namespace pf::sweep
