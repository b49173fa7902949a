// The optimizers' work on CUDA parameters (value, grad and state tensors on one CUDA device),
// through the CUDA backend (cuda_backend.h): on the calling thread's current stream of that device.
// The CPU code in sgd.cc / adamw.cc / optimizer.cc calls these when the parameter is a CUDA tensor.
#pragma once

#include <cstdint>

#include "runtime/layers/parameter.h"
#include "runtime/optim/optimizer.h"

namespace pf::gpu {

// buf: the momentum slot (undefined when config.momentum == 0).
void sgd_update(const Parameter& param, const Tensor& buf, const OptimizerConfig& config, int64_t step);
// PyTorch's AdamW on the fp32 value (pf::cuda::adamw_step; per-step scalars as on the CPU).
void adamw_update(const Parameter& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const OptimizerConfig& config, int64_t step);
// Sum of squares of the gradient in double (waits for the device to return it).
double grad_squared_norm(const Parameter& param);
// grad *= scale.
void scale_grad(const Parameter& param, float scale);

}  // namespace pf::gpu
