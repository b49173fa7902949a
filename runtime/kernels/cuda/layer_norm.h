// LayerNorm over the last dimension (runtime/layers/layer_norm.cc; formulas in element_ops.h):
// x [rows, dim] -> y = (x - mean) * rstd * gamma + beta, biased variance, eps inside the sqrt.
// The GPU saves mean and rstd per row (fp32) instead of the CPU's xhat and recomputes
// xhat = (x - mean) * rstd in B and W from the saved input x.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// F: writes y [rows, dim], mean [rows], rstd [rows].
template <typename T>
void layer_norm_forward(cudaStream_t stream, int64_t rows, int64_t dim, float eps, const T* x,
                        const T* gamma, const T* beta, T* y, float* mean, float* rstd);

// B: dx = residual_grad + rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)).
// residual_grad may be null (then dx is the LayerNorm input gradient alone); it is the fused
// residual connection of a pre-LN block (dx = dy_block + LN'(...)). dx is written, not accumulated;
// it may alias residual_grad.
template <typename T>
void layer_norm_backward_input(cudaStream_t stream, int64_t rows, int64_t dim, const T* x,
                               const float* mean, const float* rstd, const T* gamma, const T* dy,
                               const T* residual_grad, T* dx);

// W: dgamma[i] += sum_r dy[r,i] * xhat[r,i]; dbeta[i] += sum_r dy[r,i] (fp32). Deterministic:
// fixed-order column sums, no atomics (block_reduce.cuh).
template <typename T>
void layer_norm_backward_weight(cudaStream_t stream, int64_t rows, int64_t dim, const T* x,
                                const float* mean, const float* rstd, const T* dy, float* dgamma,
                                float* dbeta);

}  // namespace pf::cuda
