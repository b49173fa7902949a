// AdamW with fp32 master weights (runtime/optim/adamw.cc, PyTorch's torch.optim.AdamW; the element
// update is adamw_update in element_ops.h):
//   w *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// on the fp32 master copy, then (optionally) writes the bf16 copy the bf16 kernels compute with.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct AdamWHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
};

// One step (`step` counts from 1) for one parameter of n elements, all fp32 device arrays;
// param_bf16 (nullable) receives round-to-nearest-even bf16 copies of the updated weights.
void adamw_step(cudaStream_t stream, int64_t n, const AdamWHyper& hyper, int64_t step, float* master,
                const float* grad, float* exp_avg, float* exp_avg_sq, bf16* param_bf16 = nullptr);

// The same with precomputed per-step scalars (adamw_scalars in element_ops.h).
void adamw_step(cudaStream_t stream, int64_t n, const AdamWScalars& scalars, float* master,
                const float* grad, float* exp_avg, float* exp_avg_sq, bf16* param_bf16 = nullptr);

}  // namespace pf::cuda
