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

// The vocabulary-parallel loss (runtime/layers/cross_entropy.cc, forward_split / backward_split):
// this member holds classes [first, first + classes) of every row. The group combines the parts on
// the host between the calls.
// maxima[r] = the largest of row r's logits (fp32).
template <typename T>
void logits_row_max(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits, float* maxima);

// sums[r] = sum_c exp(x_rc - maxima[r]) (fp64), sums[rows + r] = x_r,(target_r - first) where this
// member holds the target, else 0. `maxima` are the whole rows' (the group's largest).
template <typename T>
void vocab_cross_entropy_sums(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                              const int32_t* targets, int64_t first, const float* maxima, double* sums);

// grad[r, c] = coef * (exp(x_rc - maxima[r]) * inverse_sums[r] - [first + c == target_r]), with the
// whole rows' maxima and inverse sums (not accumulated).
template <typename T>
void vocab_cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                                  const int32_t* targets, int64_t first, const float* maxima,
                                  const double* inverse_sums, double coef, T* grad);

}  // namespace pf::cuda
