#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/softmax.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// One block per row. Every thread touches only columns j = threadIdx.x + k * blockDim.x and reads
// each of them before writing it, so in-place use (probs == scores) is safe.
template <typename T>
__global__ void causal_softmax_forward_kernel(int64_t steps, bool causal, const float* scores, T* probs) {
  const int64_t row = blockIdx.x;
  const int64_t last = causal ? row % steps : steps - 1;  // query position i: columns 0..i are kept
  const float* s = scores + row * steps;
  T* p = probs + row * steps;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, s[j]);
  const float row_max = detail::block_max(m);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) sum += fast_exp(s[j] - row_max);
  const float inv_sum = 1.0f / detail::block_sum(sum);
  for (int64_t j = threadIdx.x; j < steps; j += blockDim.x) {
    p[j] = from_f32<T>(j <= last ? softmax_prob(s[j], row_max, inv_sum) : 0.0f);
  }
}

template <typename T>
__global__ void causal_softmax_backward_kernel(int64_t steps, bool causal, const T* probs, const float* dprobs,
                                               T* dscores) {
  const int64_t row = blockIdx.x;
  const int64_t last = causal ? row % steps : steps - 1;
  const T* p = probs + row * steps;
  const float* dp = dprobs + row * steps;
  T* ds = dscores + row * steps;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= last; j += blockDim.x) dot += to_f32(p[j]) * dp[j];
  dot = detail::block_sum(dot);
  for (int64_t j = threadIdx.x; j < steps; j += blockDim.x) {
    ds[j] = from_f32<T>(j <= last ? softmax_grad(to_f32(p[j]), dp[j], dot) : 0.0f);
  }
}

}  // namespace

template <typename T>
void causal_softmax_forward(cudaStream_t stream, int64_t rows, int64_t steps, const float* scores,
                            T* probs, bool causal) {
  if (rows <= 0 || steps <= 0) return;
  causal_softmax_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(steps, causal, scores,
                                                                                      probs);
  PF_CHECK_LAUNCH("causal_softmax_forward");
}

template <typename T>
void causal_softmax_backward(cudaStream_t stream, int64_t rows, int64_t steps, const T* probs,
                             const float* dprobs, T* dscores, bool causal) {
  if (rows <= 0 || steps <= 0) return;
  causal_softmax_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(steps, causal, probs,
                                                                                           dprobs, dscores);
  PF_CHECK_LAUNCH("causal_softmax_backward");
}

template void causal_softmax_forward<float>(cudaStream_t, int64_t, int64_t, const float*, float*, bool);
template void causal_softmax_forward<bf16>(cudaStream_t, int64_t, int64_t, const float*, bf16*, bool);
template void causal_softmax_backward<float>(cudaStream_t, int64_t, int64_t, const float*, const float*,
                                             float*, bool);
template void causal_softmax_backward<bf16>(cudaStream_t, int64_t, int64_t, const bf16*, const float*,
                                            bf16*, bool);

}  // namespace pf::cuda
