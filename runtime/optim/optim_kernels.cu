#include <cuda_runtime.h>

#include "runtime/optim/optim_kernels.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kNormBlocks = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 4096 ? b : 4096);
}

__global__ void sgd_kernel(int64_t n, float lr, float wd, float mu, bool first, float* __restrict__ w,
                           const float* __restrict__ g, float* __restrict__ buf) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float wi = w[i];
    // __fmul_rn / __fadd_rn: no FMA contraction, so each step rounds as the CPU loop does.
    const float d = __fadd_rn(g[i], __fmul_rn(wd, wi));
    if (mu == 0.0f) {
      w[i] = __fsub_rn(wi, __fmul_rn(lr, d));
    } else {
      const float b = first ? d : __fadd_rn(__fmul_rn(mu, buf[i]), d);
      buf[i] = b;
      w[i] = __fsub_rn(wi, __fmul_rn(lr, b));
    }
  }
}

__global__ void partial_squares_kernel(int64_t n, const float* __restrict__ g, double* __restrict__ partial) {
  __shared__ double cache[kThreads];
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = static_cast<double>(g[i]);
    sum += v * v;
  }
  cache[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) cache[threadIdx.x] += cache[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = cache[0];
}

__global__ void sum_partials_kernel(double* workspace) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  double sum = 0.0;
  for (int i = 0; i < kNormBlocks; ++i) sum += workspace[i];
  workspace[kNormBlocks] = sum;
}

__global__ void scale_kernel(int64_t n, float scale, float* __restrict__ g) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    g[i] = __fmul_rn(g[i], scale);
  }
}

}  // namespace

cudaError_t sgd_step(cudaStream_t stream, int64_t n, float lr, float weight_decay, float momentum, bool first_step,
              float* w, const float* g, float* buf) {
  if (n <= 0) return cudaSuccess;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, lr, weight_decay, momentum, first_step, w, g, buf);
  return cudaGetLastError();
}

cudaError_t sum_of_squares(cudaStream_t stream, int64_t n, const float* g, double* workspace) {
  static_assert(kSumOfSquaresWorkspace == kNormBlocks + 1, "workspace size");
  // Always the same launch (also for n == 0, which writes zeros), so the result is deterministic.
  partial_squares_kernel<<<kNormBlocks, kThreads, 0, stream>>>(n, g, workspace);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  sum_partials_kernel<<<1, 1, 0, stream>>>(workspace);
  return cudaGetLastError();
}

cudaError_t scale_in_place(cudaStream_t stream, int64_t n, float scale, float* g) {
  if (n <= 0) return cudaSuccess;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, scale, g);
  return cudaGetLastError();
}

}  // namespace pf::cuda
