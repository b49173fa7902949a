#include <cuda_runtime.h>

#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void adamw_kernel(int64_t n, AdamWScalars s, float* __restrict__ w, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, bf16* __restrict__ w_bf16) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float wi = w[i], mi = m[i], vi = v[i];
    adamw_update(wi, g[i], mi, vi, s);
    w[i] = wi;
    m[i] = mi;
    v[i] = vi;
    if (w_bf16 != nullptr) w_bf16[i] = from_f32<bf16>(wi);
  }
}

}  // namespace

void adamw_step(cudaStream_t stream, int64_t n, const AdamWScalars& scalars, float* master,
                const float* grad, float* exp_avg, float* exp_avg_sq, bf16* param_bf16) {
  if (n <= 0) return;
  adamw_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      n, scalars, master, grad, exp_avg, exp_avg_sq, param_bf16);
  PF_CHECK_LAUNCH("adamw_step");
}

void adamw_step(cudaStream_t stream, int64_t n, const AdamWHyper& h, int64_t step, float* master,
                const float* grad, float* exp_avg, float* exp_avg_sq, bf16* param_bf16) {
  adamw_step(stream, n, adamw_scalars(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, step), master, grad,
             exp_avg, exp_avg_sq, param_bf16);
}

}  // namespace pf::cuda
