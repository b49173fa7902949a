#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/rotary.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// cosines, sines [steps, half]: inv_freq_i = 1 / theta^(2i / hd), angle = (offset + t) inv_freq_i.
__global__ void rotary_table_kernel(RotaryShape s, bool inverse, float* __restrict__ cosines,
                                    float* __restrict__ sines) {
  const int64_t half = s.head_dim / 2, n = s.steps * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int64_t t = j / half, i = j % half;
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(s.head_dim);
    const float inv_freq = 1.0f / static_cast<float>(pow(static_cast<double>(s.theta), static_cast<double>(exponent)));
    const float angle = static_cast<float>(s.offset + t) * inv_freq;
    cosines[j] = static_cast<float>(cos(static_cast<double>(angle)));
    const float sine = static_cast<float>(sin(static_cast<double>(angle)));
    sines[j] = inverse ? -sine : sine;
  }
}

// One thread per (row, head, i < half).
template <typename T>
__global__ void rotary_apply_kernel(RotaryShape s, const float* __restrict__ cosines, const float* __restrict__ sines,
                                    T* __restrict__ qkv) {
  const int64_t half = s.head_dim / 2, n = s.batch * s.steps * s.rotated_heads * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += stride) {
    const int64_t i = j % half, h = (j / half) % s.rotated_heads, row = j / (half * s.rotated_heads);
    const int64_t at = (row % s.steps) * half + i;
    const float c = cosines[at], sn = sines[at];
    T* x = qkv + row * s.width + h * s.head_dim;
    const float x1 = to_f32(x[i]), x2 = to_f32(x[i + half]);
    x[i] = from_f32<T>(x1 * c - x2 * sn);
    x[i + half] = from_f32<T>(x2 * c + x1 * sn);
  }
}

}  // namespace

size_t rotary_workspace_bytes(const RotaryShape& s) {
  return 2 * static_cast<size_t>(s.steps * (s.head_dim / 2)) * sizeof(float);
}

template <typename T>
void rotary_embedding(cudaStream_t stream, const RotaryShape& s, bool inverse, T* qkv, void* workspace) {
  const int64_t half = s.head_dim / 2, table = s.steps * half;
  if (table <= 0 || s.batch <= 0 || s.rotated_heads <= 0) return;
  float* cosines = static_cast<float*>(workspace);
  float* sines = cosines + table;
  rotary_table_kernel<<<detail::elementwise_blocks(table, kThreads), kThreads, 0, stream>>>(s, inverse, cosines,
                                                                                              sines);
  PF_CHECK_LAUNCH("rotary_embedding (table)");
  const int64_t n = s.batch * s.steps * s.rotated_heads * half;
  rotary_apply_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(s, cosines, sines, qkv);
  PF_CHECK_LAUNCH("rotary_embedding");
}

template void rotary_embedding<float>(cudaStream_t, const RotaryShape&, bool, float*, void*);
template void rotary_embedding<bf16>(cudaStream_t, const RotaryShape&, bool, bf16*, void*);

}  // namespace pf::cuda
