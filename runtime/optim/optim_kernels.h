// CUDA kernels of the optimizers that //runtime/kernels/cuda does not have: the SGD update, the
// squared L2 norm of a gradient (fp64, deterministic) and the in-place gradient scaling of
// clipping. Raw device pointers, enqueued on `stream`. Each returns the launch status
// (cudaGetLastError); the callers (cuda_optim.cc) turn it into pf::Error.
// AdamW uses pf::cuda::adamw_step (runtime/kernels/cuda/adamw.h).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

namespace pf::cuda {

// runtime/optim/sgd.cc, element by element with the same (uncontracted) fp32 operations:
//   momentum == 0: w -= lr * (g + wd * w)
//   otherwise:     d = g + wd * w; buf = first_step ? d : momentum * buf + d; w -= lr * buf
// `buf` may be null when momentum == 0.
cudaError_t sgd_step(cudaStream_t stream, int64_t n, float lr, float weight_decay, float momentum, bool first_step,
              float* w, const float* g, float* buf);

// Number of doubles sum_of_squares needs as workspace.
constexpr int64_t kSumOfSquaresWorkspace = 257;
// *result (device, fp64) = sum of g[i]^2 accumulated in double: a fixed grid of 256 blocks, each a
// fixed tree, then the 256 partials in order (deterministic run to run). `workspace` holds
// kSumOfSquaresWorkspace doubles; the result is written to workspace[256].
cudaError_t sum_of_squares(cudaStream_t stream, int64_t n, const float* g, double* workspace);

// g *= scale.
cudaError_t scale_in_place(cudaStream_t stream, int64_t n, float scale, float* g);

}  // namespace pf::cuda
