// Cross-entropy loss over logits [rows, classes] and i32 targets [rows]
// (runtime/layers/cross_entropy.cc; element_ops.h): fp64 inside, mean over ALL rows (every token),
// times `scale` (the trainer's 1/micro_batches):
//   loss = scale / rows * sum_r (max_r + log(sum_c exp(x_rc - max_r)) - x_r,target_r)
//   grad = scale / rows * (softmax(x_r)_c - [c == target_r])
// Targets must be in [0, classes) (the caller validates them on the host, as the CPU layer does);
// a row with an out-of-range target makes the loss NaN and its gradient row NaN.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// Writes loss[0] (device fp32). row_loss is a caller-owned fp64 workspace of `rows` entries
// (per-row losses, summed afterwards by one block in a fixed order: deterministic).
template <typename T>
void cross_entropy_forward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                           const int32_t* targets, float scale, double* row_loss, float* loss);

// Writes grad [rows, classes] (not accumulated); recomputes the row statistics like the CPU.
template <typename T>
void cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                            const int32_t* targets, float scale, T* grad);

}  // namespace pf::cuda
