#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/layer_norm.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;  // fixed, so the reduction order (and result) depends on dim only

// One block per row. Two passes over the row (mean, then the centred squares) like the CPU.
template <typename T>
__global__ void layer_norm_forward_kernel(int64_t dim, float eps, const T* __restrict__ x,
                                          const T* __restrict__ gamma, const T* __restrict__ beta,
                                          T* __restrict__ y, float* __restrict__ mean_out,
                                          float* __restrict__ rstd_out) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  T* yr = y + row * dim;
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += to_f32(xr[i]);
  const float mean = detail::block_sum(sum) * inv_dim;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float c = to_f32(xr[i]) - mean;
    sq += c * c;
  }
  const float rstd = layer_norm_rstd(detail::block_sum(sq), inv_dim, eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float xhat = layer_norm_xhat(to_f32(xr[i]), mean, rstd);
    yr[i] = from_f32<T>(layer_norm_output(xhat, to_f32(gamma[i]), to_f32(beta[i])));
  }
  if (threadIdx.x == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void layer_norm_backward_input_kernel(int64_t dim, const T* __restrict__ x,
                                                 const float* __restrict__ mean,
                                                 const float* __restrict__ rstd,
                                                 const T* __restrict__ gamma, const T* dy,
                                                 const T* residual_grad, T* dx) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  const T* dyr = dy + row * dim;
  const float mu = mean[row], rs = rstd[row];
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float sum_d = 0.0f, sum_d_xhat = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float d = to_f32(dyr[i]) * to_f32(gamma[i]);
    sum_d += d;
    sum_d_xhat += d * layer_norm_xhat(to_f32(xr[i]), mu, rs);
  }
  const float mean_d = detail::block_sum(sum_d) * inv_dim;
  const float mean_d_xhat = detail::block_sum(sum_d_xhat) * inv_dim;
  // Each thread reads then writes only its own elements, so dx may alias residual_grad.
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float xhat = layer_norm_xhat(to_f32(xr[i]), mu, rs);
    float g = layer_norm_input_grad(to_f32(dyr[i]), to_f32(gamma[i]), xhat, rs, mean_d, mean_d_xhat);
    if (residual_grad != nullptr) g = to_f32(residual_grad[row * dim + i]) + g;
    dx[row * dim + i] = from_f32<T>(g);
  }
}

template <typename T>
struct LayerNormWeightTerms {
  const T* x;
  const float* mean;
  const float* rstd;
  const T* dy;
  int64_t dim;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[2]) const {
    const float g = to_f32(dy[r * dim + c]);
    v[0] = g * layer_norm_xhat(to_f32(x[r * dim + c]), mean[r], rstd[r]);
    v[1] = g;
  }
};

}  // namespace

template <typename T>
void layer_norm_forward(cudaStream_t stream, int64_t rows, int64_t dim, float eps, const T* x,
                        const T* gamma, const T* beta, T* y, float* mean, float* rstd) {
  if (rows <= 0 || dim <= 0) return;
  layer_norm_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dim, eps, x, gamma,
                                                                                      beta, y, mean, rstd);
  PF_CHECK_LAUNCH("layer_norm_forward");
}

template <typename T>
void layer_norm_backward_input(cudaStream_t stream, int64_t rows, int64_t dim, const T* x,
                               const float* mean, const float* rstd, const T* gamma, const T* dy,
                               const T* residual_grad, T* dx) {
  if (rows <= 0 || dim <= 0) return;
  layer_norm_backward_input_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      dim, x, mean, rstd, gamma, dy, residual_grad, dx);
  PF_CHECK_LAUNCH("layer_norm_backward_input");
}

template <typename T>
void layer_norm_backward_weight(cudaStream_t stream, int64_t rows, int64_t dim, const T* x,
                                const float* mean, const float* rstd, const T* dy, float* dgamma,
                                float* dbeta) {
  if (rows <= 0 || dim <= 0) return;
  const dim3 block(detail::kColTile, detail::kRowLanes);
  const unsigned grid = static_cast<unsigned>((dim + detail::kColTile - 1) / detail::kColTile);
  detail::ColumnOutputs<2> outputs{{dgamma, dbeta}};
  detail::column_sum_kernel<2><<<grid, block, 0, stream>>>(
      rows, dim, LayerNormWeightTerms<T>{x, mean, rstd, dy, dim}, outputs);
  PF_CHECK_LAUNCH("layer_norm_backward_weight");
}

#define PF_INSTANTIATE(T)                                                                          \
  template void layer_norm_forward<T>(cudaStream_t, int64_t, int64_t, float, const T*, const T*,   \
                                      const T*, T*, float*, float*);                               \
  template void layer_norm_backward_input<T>(cudaStream_t, int64_t, int64_t, const T*, const float*, \
                                             const float*, const T*, const T*, const T*, T*);      \
  template void layer_norm_backward_weight<T>(cudaStream_t, int64_t, int64_t, const T*, const float*, \
                                              const float*, const T*, float*, float*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
