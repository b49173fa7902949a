// The softmax of attention scores (runtime/layers/attention.cc; element_ops.h).
// scores/probs are [rows, steps] with rows = batch * heads * steps: row r is query position
// i = r % steps, which attends to key positions j <= i when `causal` (probabilities of j > i are
// written as 0), and to every key position otherwise (bidirectional attention).
// Scores are fp32 (the gemm that makes them already applied the 1/sqrt(head_dim) scale).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// probs = causal_softmax(scores). For T = float, probs may be the scores buffer (in place).
template <typename T>
void causal_softmax_forward(cudaStream_t stream, int64_t rows, int64_t steps, const float* scores,
                            T* probs, bool causal = true);

// dscores_j = p_j * (dp_j - sum_{k<=i} p_k dp_k) for j <= i, 0 for j > i (causal; without the mask
// the sums and outputs cover every j). For T = float, dscores
// may be the dprobs buffer (in place).
template <typename T>
void causal_softmax_backward(cudaStream_t stream, int64_t rows, int64_t steps, const T* probs,
                             const float* dprobs, T* dscores, bool causal = true);

}  // namespace pf::cuda
