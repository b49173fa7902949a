#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/rms_norm.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;  // fixed, so the reduction order (and result) depends on dim only

// One block per row.
template <typename T>
__global__ void rms_norm_forward_kernel(int64_t dim, float eps, const T* __restrict__ x, const T* __restrict__ weight,
                                        T* __restrict__ y, T* __restrict__ xhat, float* __restrict__ rstd_out) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = to_f32(xr[i]);
    sq += v * v;
  }
  const float rstd = norm_rstd(detail::block_sum(sq), static_cast<float>(dim), eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float xh = to_f32(xr[i]) * rstd;
    xhat[row * dim + i] = from_f32<T>(xh);
    y[row * dim + i] = from_f32<T>(to_f32(weight[i]) * xh);
  }
  if (threadIdx.x == 0) rstd_out[row] = rstd;
}

template <typename T>
__global__ void rms_norm_backward_input_kernel(int64_t dim, const T* __restrict__ xhat, const float* __restrict__ rstd,
                                               const T* __restrict__ weight, const T* __restrict__ dy,
                                               T* __restrict__ dx) {
  const int64_t row = blockIdx.x;
  const T* xr = xhat + row * dim;
  const T* dyr = dy + row * dim;
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dot += to_f32(dyr[i]) * to_f32(weight[i]) * to_f32(xr[i]);
  const float mean_dot = detail::block_sum(dot) / static_cast<float>(dim);
  const float s = rstd[row];
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    dx[row * dim + i] = from_f32<T>(rms_norm_input_grad(to_f32(dyr[i]), to_f32(weight[i]), to_f32(xr[i]), s, mean_dot));
  }
}

template <typename T>
struct RmsNormWeightTerms {
  const T* xhat;
  const T* dy;
  int64_t dim;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const {
    v[0] = to_f32(dy[r * dim + c]) * to_f32(xhat[r * dim + c]);
  }
};

}  // namespace

template <typename T>
void rms_norm_forward(cudaStream_t stream, int64_t rows, int64_t dim, float eps, const T* x, const T* weight, T* y,
                      T* xhat, float* rstd) {
  if (rows <= 0 || dim <= 0) return;
  rms_norm_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dim, eps, x, weight, y, xhat, rstd);
  PF_CHECK_LAUNCH("rms_norm_forward");
}

template <typename T>
void rms_norm_backward_input(cudaStream_t stream, int64_t rows, int64_t dim, const T* xhat, const float* rstd,
                             const T* weight, const T* dy, T* dx) {
  if (rows <= 0 || dim <= 0) return;
  rms_norm_backward_input_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(dim, xhat, rstd, weight,
                                                                                          dy, dx);
  PF_CHECK_LAUNCH("rms_norm_backward_input");
}

template <typename T>
void rms_norm_backward_weight(cudaStream_t stream, int64_t rows, int64_t dim, const T* xhat, const T* dy,
                              float* dweight) {
  if (rows <= 0 || dim <= 0) return;
  const dim3 block(detail::kColTile, detail::kRowLanes);
  const unsigned grid = static_cast<unsigned>((dim + detail::kColTile - 1) / detail::kColTile);
  detail::ColumnOutputs<1> outputs{{dweight}};
  detail::column_sum_kernel<1><<<grid, block, 0, stream>>>(rows, dim, RmsNormWeightTerms<T>{xhat, dy, dim}, outputs);
  PF_CHECK_LAUNCH("rms_norm_backward_weight");
}

#define PF_INSTANTIATE(T)                                                                                        \
  template void rms_norm_forward<T>(cudaStream_t, int64_t, int64_t, float, const T*, const T*, T*, T*, float*); \
  template void rms_norm_backward_input<T>(cudaStream_t, int64_t, int64_t, const T*, const float*, const T*,     \
                                           const T*, T*);                                                        \
  template void rms_norm_backward_weight<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, float*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
