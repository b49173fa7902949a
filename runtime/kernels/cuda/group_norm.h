// GroupNorm (runtime/layers/group_norm.cc; formulas in element_ops.h): x [batch, channels, spatial]
// (spatial = H*W or any trailing size), the channels in `groups` groups of channels / groups
// consecutive channels, so each (sample, group) is one contiguous run of count = channels / groups *
// spatial values, normalised by its own mean and biased variance, then scaled and shifted per channel.
// The GPU keeps what the CPU layer keeps: xhat [batch, channels, spatial] and rstd [batch, groups].
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct GroupNormShape {
  int64_t batch = 0, channels = 0, groups = 0, spatial = 0;
};

// F: writes y and xhat, and rstd [batch, groups].
template <typename T>
void group_norm_forward(cudaStream_t stream, const GroupNormShape& shape, float eps, const T* x, const T* weight,
                        const T* bias, T* y, T* xhat, float* rstd);

// B: dx = rstd * (g - mean(g) - xhat * mean(g xhat)) over the group, g = dy * weight[c]; written.
template <typename T>
void group_norm_backward_input(cudaStream_t stream, const GroupNormShape& shape, const T* xhat, const float* rstd,
                               const T* weight, const T* dy, T* dx);

// W: dweight[c] += sum dy * xhat, dbias[c] += sum dy (fp32). One block per channel adds each
// sample's block sum in sample order (as the CPU adds each sample's sum): deterministic, no atomics.
template <typename T>
void group_norm_backward_weight(cudaStream_t stream, const GroupNormShape& shape, const T* xhat, const T* dy,
                                float* dweight, float* dbias);

}  // namespace pf::cuda
