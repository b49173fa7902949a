#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/grouped_query.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void sum_query_head_groups_kernel(int64_t steps, int64_t heads, int64_t kv_heads, int64_t hd,
                                             const float* __restrict__ in, T* __restrict__ out, int64_t ld) {
  const int64_t group = heads / kv_heads, n = steps * kv_heads * hd;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int64_t i = j % hd, g = (j / hd) % kv_heads, t = j / (hd * kv_heads);
    const float* row = in + t * heads * hd + g * group * hd + i;
    float acc = row[0];
    for (int64_t h = 1; h < group; ++h) acc += row[h * hd];
    out[t * ld + g * hd + i] = from_f32<T>(acc);
  }
}

}  // namespace

template <typename T>
void sum_query_head_groups(cudaStream_t stream, int64_t steps, int64_t heads, int64_t kv_heads, int64_t head_dim,
                           const float* per_query_head, T* out, int64_t ld) {
  const int64_t n = steps * kv_heads * head_dim;
  if (n <= 0) return;
  sum_query_head_groups_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      steps, heads, kv_heads, head_dim, per_query_head, out, ld);
  PF_CHECK_LAUNCH("sum_query_head_groups");
}

template void sum_query_head_groups<float>(cudaStream_t, int64_t, int64_t, int64_t, int64_t, const float*, float*,
                                           int64_t);
template void sum_query_head_groups<bf16>(cudaStream_t, int64_t, int64_t, int64_t, int64_t, const float*, bf16*,
                                          int64_t);

}  // namespace pf::cuda
