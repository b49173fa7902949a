// What the runtime's real steps add to the simulated ones on this machine, measured once by
// training three small candidates for a few steps: the sequential trainer, and 1F1B on two ranks
// with 2 and with 4 micro-batches.
// Layer times profiled one at a time run slower when ranks compute side by side (shared caches and
// memory bandwidth, a loaded machine), every pipelined action costs a hand-off, and every step has
// fixed work outside the schedule (zeroing gradients, splitting the batch, waking the workers).
#pragma once

#include <memory>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/planner/candidates.h"
#include "runtime/train/batch.h"

namespace pf::plan {

// Measures request.profile's calibration (ModelProfile::calibration) with `model` and
// `step_batch` (the rows of one step of m = 4 micro-batches, of a size the profile has), `steps`
// steps after one warm-up. The model's parameters are re-initialised and trained: use a copy.
Calibration calibrate(const PlanRequest& request, std::shared_ptr<Model> model, const Batch& step_batch,
                      const OptimizerConfig& optimizer, int steps);

}  // namespace pf::plan
