// The optimizers' update rules on plain float arrays on the CPU: AdamW::update and Sgd::update run
// them on a parameter, the packed MLP sweep (runtime/sweep) on each packed model's slices with the
// model's own learning rate. The formulas are in adamw.h and sgd.h.
#pragma once

#include <cstdint>

#include "runtime/optim/optimizer.h"

namespace pf::cpu {

// AdamW's bias corrections at optimizer step `step` (from 1): 1 - beta1^step and sqrt(1 - beta2^step).
struct AdamWBias {
  float bias1 = 1, bias2_sqrt = 1;
};
AdamWBias adamw_bias(const OptimizerConfig& config, int64_t step);

// One AdamW update of n elements with learning rate `lr` (config.lr is not read) and the step's
// bias corrections; exp_avg and exp_avg_sq are the two moments.
void adamw_update(int64_t n, float* w, const float* g, float* exp_avg, float* exp_avg_sq, const OptimizerConfig& config,
                  float lr, const AdamWBias& bias);
// The same at optimizer step `step`.
void adamw_update(int64_t n, float* w, const float* g, float* exp_avg, float* exp_avg_sq, const OptimizerConfig& config,
                  float lr, int64_t step);

// One SGD update; `momentum_buffer` may be null when config.momentum is 0.
void sgd_update(int64_t n, float* w, const float* g, float* momentum_buffer, const OptimizerConfig& config, float lr,
                int64_t step);

}  // namespace pf::cpu
