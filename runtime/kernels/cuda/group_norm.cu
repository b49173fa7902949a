#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/group_norm.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;  // fixed, so the reduction order depends on the shape only

// One block per (sample, group): the group's values are contiguous, [per_group channels][spatial].
template <typename T>
__global__ void group_norm_forward_kernel(GroupNormShape s, float eps, const T* __restrict__ x,
                                          const T* __restrict__ weight, const T* __restrict__ bias,
                                          T* __restrict__ y, T* __restrict__ xhat, float* __restrict__ rstd_out) {
  const int64_t per_group = s.channels / s.groups, count = per_group * s.spatial;
  const int64_t grp = blockIdx.x % s.groups;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * count;  // (b * channels + grp * per_group) * spatial
  const T* xg = x + offset;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += to_f32(xg[i]);
  const float mean = detail::block_sum(sum) / static_cast<float>(count);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float c = to_f32(xg[i]) - mean;
    sq += c * c;
  }
  const float rstd = norm_rstd(detail::block_sum(sq), static_cast<float>(count), eps);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t channel = grp * per_group + i / s.spatial;
    const float xh = (to_f32(xg[i]) - mean) * rstd;
    xhat[offset + i] = from_f32<T>(xh);
    y[offset + i] = from_f32<T>(xh * to_f32(weight[channel]) + to_f32(bias[channel]));
  }
  if (threadIdx.x == 0) rstd_out[blockIdx.x] = rstd;
}

template <typename T>
__global__ void group_norm_backward_input_kernel(GroupNormShape s, const T* __restrict__ xhat,
                                                 const float* __restrict__ rstd, const T* __restrict__ weight,
                                                 const T* __restrict__ dy, T* __restrict__ dx) {
  const int64_t per_group = s.channels / s.groups, count = per_group * s.spatial;
  const int64_t grp = blockIdx.x % s.groups;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * count;
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float g = to_f32(dy[offset + i]) * to_f32(weight[grp * per_group + i / s.spatial]);
    sum_g += g;
    sum_gx += g * to_f32(xhat[offset + i]);
  }
  const float mean_g = detail::block_sum(sum_g) / static_cast<float>(count);
  const float mean_gx = detail::block_sum(sum_gx) / static_cast<float>(count);
  const float r = rstd[blockIdx.x];
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float w = to_f32(weight[grp * per_group + i / s.spatial]);
    dx[offset + i] =
        from_f32<T>(group_norm_input_grad(to_f32(dy[offset + i]), w, to_f32(xhat[offset + i]), r, mean_g, mean_gx));
  }
}

// One block per channel: for each sample in order, the block sums of dy xhat and dy over the
// channel's positions are added to the running totals (started from the existing gradient).
template <typename T>
__global__ void group_norm_backward_weight_kernel(GroupNormShape s, const T* __restrict__ xhat,
                                                  const T* __restrict__ dy, float* __restrict__ dweight,
                                                  float* __restrict__ dbias) {
  const int64_t c = blockIdx.x;
  float w_total = dweight[c], b_total = dbias[c];
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t offset = (b * s.channels + c) * s.spatial;
    float w_sum = 0.0f, b_sum = 0.0f;
    for (int64_t i = threadIdx.x; i < s.spatial; i += blockDim.x) {
      const float g = to_f32(dy[offset + i]);
      w_sum += g * to_f32(xhat[offset + i]);
      b_sum += g;
    }
    w_total += detail::block_sum(w_sum);
    b_total += detail::block_sum(b_sum);
  }
  if (threadIdx.x == 0) {
    dweight[c] = w_total;
    dbias[c] = b_total;
  }
}

}  // namespace

template <typename T>
void group_norm_forward(cudaStream_t stream, const GroupNormShape& s, float eps, const T* x, const T* weight,
                        const T* bias, T* y, T* xhat, float* rstd) {
  if (s.batch <= 0 || s.channels <= 0 || s.spatial <= 0) return;
  group_norm_forward_kernel<T><<<static_cast<unsigned>(s.batch * s.groups), kThreads, 0, stream>>>(
      s, eps, x, weight, bias, y, xhat, rstd);
  PF_CHECK_LAUNCH("group_norm_forward");
}

template <typename T>
void group_norm_backward_input(cudaStream_t stream, const GroupNormShape& s, const T* xhat, const float* rstd,
                               const T* weight, const T* dy, T* dx) {
  if (s.batch <= 0 || s.channels <= 0 || s.spatial <= 0) return;
  group_norm_backward_input_kernel<T><<<static_cast<unsigned>(s.batch * s.groups), kThreads, 0, stream>>>(
      s, xhat, rstd, weight, dy, dx);
  PF_CHECK_LAUNCH("group_norm_backward_input");
}

template <typename T>
void group_norm_backward_weight(cudaStream_t stream, const GroupNormShape& s, const T* xhat, const T* dy,
                                float* dweight, float* dbias) {
  if (s.batch <= 0 || s.channels <= 0 || s.spatial <= 0) return;
  group_norm_backward_weight_kernel<T><<<static_cast<unsigned>(s.channels), kThreads, 0, stream>>>(s, xhat, dy,
                                                                                                   dweight, dbias);
  PF_CHECK_LAUNCH("group_norm_backward_weight");
}

#define PF_INSTANTIATE(T)                                                                                      \
  template void group_norm_forward<T>(cudaStream_t, const GroupNormShape&, float, const T*, const T*, const T*, \
                                      T*, T*, float*);                                                         \
  template void group_norm_backward_input<T>(cudaStream_t, const GroupNormShape&, const T*, const float*,      \
                                             const T*, const T*, T*);                                          \
  template void group_norm_backward_weight<T>(cudaStream_t, const GroupNormShape&, const T*, const T*, float*, \
                                              float*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
