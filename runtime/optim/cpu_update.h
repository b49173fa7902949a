// The optimizers' update rules on plain float arrays on the CPU: AdamW::update and Sgd::update run
// them on a parameter, the packed MLP sweep (runtime/sweep) on each packed model's slices with the
// model's own learning rate. The formulas are in adamw.h and sgd.h.
#pragma once

#include <cstdint>

#include "runtime/optim/optimizer.h"

namespace pf::cpu {

// One AdamW update of n elements at optimizer step `step` (from 1) with learning rate `lr`
// (config.lr is not read); exp_avg and exp_avg_sq are the two moments.
void adamw_update(int64_t n, float* w, const float* g, float* exp_avg, float* exp_avg_sq, const OptimizerConfig& config,
                  float lr, int64_t step);

// One SGD update; `momentum_buffer` may be null when config.momentum is 0.
void sgd_update(int64_t n, float* w, const float* g, float* momentum_buffer, const OptimizerConfig& config, float lr,
                int64_t step);

}  // namespace pf::cpu
