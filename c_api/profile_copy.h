// The planner's per-layer profile of a C caller's model, measured on a copy of it (profiling
// leaves gradients behind, and the planner's calibration trains the copy), for pf_plan_create and
// an adaptive trainer's first step.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/planner/model_profile.h"
#include "runtime/train/batch.h"

namespace pf::capi {

// Profiles a copy of `model` at each of `rows` (ascending; each divides batch.rows()), every
// micro-batch cut from the front of `batch`. *copy, when not null, receives the copy.
pf::plan::ModelProfile profile_model_copy(const pf::Model& model, const pf::Batch& batch,
                                          const std::vector<int64_t>& rows, const pf::OptimizerConfig& optimizer,
                                          int repeats, std::shared_ptr<pf::Model>* copy = nullptr);

}  // namespace pf::capi
