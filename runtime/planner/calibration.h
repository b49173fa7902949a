// What the runtime's real steps add to the simulated ones on this machine, measured once by
// training a few small candidates for a few steps each: the sequential trainer, and on two ranks
// 1F1B and ZB-V with 2, 4, 8 and 16 micro-batches (those that split the batch and the plan
// searches; ZB-V when the model has 4 layers or more). Layer times profiled one at a time differ
// from the trainer's when ranks compute side by side (shared caches and memory bandwidth, a loaded
// machine), and differently at each micro-batch size (the profile of a small micro-batch runs
// slower per row than the trainer does); every pipelined action costs a hand-off, and every step
// has fixed work outside the schedule (zeroing gradients, splitting the batch, waking the workers).
// A hand-off between ranks costs more than one between two stages of the same rank, so the
// overheads per action and per cross-rank transfer are fitted apart (overhead_fit.h).
#pragma once

#include <memory>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/planner/candidates.h"
#include "runtime/train/batch.h"

namespace pf::plan {

// Measures request.profile's calibration (ModelProfile::calibration) with `model` and
// `step_batch` (the rows of one step of m = 4 micro-batches, of a size the profile has), `steps`
// steps after one warm-up: compute_scale over every pipelined run, relative_scale_by_rows per
// micro-batch size of them. The model's parameters are re-initialised and trained: use a copy.
Calibration calibrate(const PlanRequest& request, std::shared_ptr<Model> model, const Batch& step_batch,
                      const OptimizerConfig& optimizer, int steps);

// The process_compute_scale that makes the predicted step of `candidate` (D > 1: processes) equal
// `measured_step_s`, everything else as request.profile.calibration says (by bisection in
// [0.1, 100]: the predicted step grows with it).
double fit_process_compute_scale(const PlanRequest& request, const Candidate& candidate, double measured_step_s);

}  // namespace pf::plan
