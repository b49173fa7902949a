#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/pooling.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per output.
template <typename T>
__global__ void pool2d_forward_kernel(PoolShape s, bool max, const T* __restrict__ x, T* __restrict__ y,
                                      int32_t* __restrict__ argmax) {
  const int64_t oh = s.out_height(), ow = s.out_width(), n = s.planes * oh * ow;
  const float inverse_count = 1.0f / static_cast<float>(s.kernel * s.kernel);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, plane = i / (oh * ow);
    const T* xp = x + plane * s.height * s.width;
    const int64_t first = oy * s.stride * s.width + ox * s.stride;
    if (max) {
      int64_t at = first;
      float best = to_f32(xp[at]);
      for (int64_t ky = 0; ky < s.kernel; ++ky) {
        for (int64_t kx = 0; kx < s.kernel; ++kx) {
          const int64_t j = first + ky * s.width + kx;
          const float v = to_f32(xp[j]);
          if (v > best || (isnan(v) && !isnan(best))) {
            at = j;
            best = v;
          }
        }
      }
      y[i] = xp[at];
      argmax[i] = static_cast<int32_t>(at);
    } else {
      float sum = 0.0f;
      for (int64_t ky = 0; ky < s.kernel; ++ky)
        for (int64_t kx = 0; kx < s.kernel; ++kx) sum += to_f32(xp[first + ky * s.width + kx]);
      y[i] = from_f32<T>(sum * inverse_count);
    }
  }
}

// One thread per input element: the windows (oy, ox) that cover it, in output order.
template <typename T>
__global__ void pool2d_backward_kernel(PoolShape s, bool max, const T* __restrict__ dy,
                                       const int32_t* __restrict__ argmax, T* __restrict__ dx) {
  const int64_t oh = s.out_height(), ow = s.out_width(), n = s.planes * s.height * s.width;
  const float inverse_count = 1.0f / static_cast<float>(s.kernel * s.kernel);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t at = i % (s.height * s.width), plane = i / (s.height * s.width);
    const int64_t ix = at % s.width, iy = at / s.width;
    // oy covers iy when oy * stride <= iy < oy * stride + kernel.
    const int64_t y_from = iy - s.kernel + 1, x_from = ix - s.kernel + 1;
    const int64_t y_lo = y_from > 0 ? (y_from + s.stride - 1) / s.stride : 0;
    const int64_t x_lo = x_from > 0 ? (x_from + s.stride - 1) / s.stride : 0;
    const int64_t y_hi = iy / s.stride, x_hi = ix / s.stride;
    float acc = 0.0f;
    for (int64_t oy = y_lo; oy <= y_hi && oy < oh; ++oy) {
      for (int64_t ox = x_lo; ox <= x_hi && ox < ow; ++ox) {
        const int64_t o = (plane * oh + oy) * ow + ox;
        if (max) {
          if (argmax[o] == at) acc += to_f32(dy[o]);
        } else {
          acc += to_f32(dy[o]) * inverse_count;
        }
      }
    }
    dx[i] = from_f32<T>(acc);
  }
}

// One block per plane.
template <typename T>
__global__ void global_avg_pool_forward_kernel(int64_t spatial, const T* __restrict__ x, T* __restrict__ y) {
  const int64_t plane = blockIdx.x;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < spatial; i += blockDim.x) sum += to_f32(x[plane * spatial + i]);
  sum = detail::block_sum(sum);
  if (threadIdx.x == 0) y[plane] = from_f32<T>(sum * (1.0f / static_cast<float>(spatial)));
}

template <typename T>
__global__ void global_avg_pool_backward_kernel(int64_t planes, int64_t spatial, const T* __restrict__ dy,
                                                T* __restrict__ dx) {
  const float inverse_count = 1.0f / static_cast<float>(spatial);
  const int64_t n = planes * spatial, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dx[i] = from_f32<T>(to_f32(dy[i / spatial]) * inverse_count);
}

}  // namespace

template <typename T>
void pool2d_forward(cudaStream_t stream, const PoolShape& s, bool max, const T* x, T* y, int32_t* argmax) {
  const int64_t n = s.planes * s.out_height() * s.out_width();
  if (n <= 0) return;
  pool2d_forward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(s, max, x, y, argmax);
  PF_CHECK_LAUNCH("pool2d_forward");
}

template <typename T>
void pool2d_backward(cudaStream_t stream, const PoolShape& s, bool max, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t n = s.planes * s.height * s.width;
  if (n <= 0) return;
  pool2d_backward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(s, max, dy, argmax, dx);
  PF_CHECK_LAUNCH("pool2d_backward");
}

template <typename T>
void global_avg_pool_forward(cudaStream_t stream, int64_t planes, int64_t spatial, const T* x, T* y) {
  if (planes <= 0 || spatial <= 0) return;
  global_avg_pool_forward_kernel<T><<<static_cast<unsigned>(planes), kThreads, 0, stream>>>(spatial, x, y);
  PF_CHECK_LAUNCH("global_avg_pool_forward");
}

template <typename T>
void global_avg_pool_backward(cudaStream_t stream, int64_t planes, int64_t spatial, const T* dy, T* dx) {
  const int64_t n = planes * spatial;
  if (n <= 0) return;
  global_avg_pool_backward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(planes, spatial,
                                                                                                       dy, dx);
  PF_CHECK_LAUNCH("global_avg_pool_backward");
}

#define PF_INSTANTIATE(T)                                                                                      \
  template void pool2d_forward<T>(cudaStream_t, const PoolShape&, bool, const T*, T*, int32_t*);              \
  template void pool2d_backward<T>(cudaStream_t, const PoolShape&, bool, const T*, const int32_t*, T*);       \
  template void global_avg_pool_forward<T>(cudaStream_t, int64_t, int64_t, const T*, T*);                     \
  template void global_avg_pool_backward<T>(cudaStream_t, int64_t, int64_t, const T*, T*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
