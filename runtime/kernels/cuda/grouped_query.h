// Grouped-query attention's key/value gradients (runtime/layers/attention.cc): the attention
// backward computes one key (value) gradient per query head into a [steps, heads * hd] fp32
// workspace; the gradient of a shared key/value head g is the sum over its query heads
// g * group .. g * group + group - 1, added in head order (as the CPU does), written into columns
// g * hd of `out` (row stride `ld`, e.g. a column slice of d_qkv).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

template <typename T>
void sum_query_head_groups(cudaStream_t stream, int64_t steps, int64_t heads, int64_t kv_heads, int64_t head_dim,
                           const float* per_query_head, T* out, int64_t ld);

}  // namespace pf::cuda
