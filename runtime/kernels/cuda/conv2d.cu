#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/conv2d.h"
#include "runtime/kernels/cuda/element_ops.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per patch-matrix element.
template <typename T>
__global__ void im2col_kernel(ConvShape s, const T* __restrict__ images, T* __restrict__ patches) {
  const int64_t cols = s.cols(), n = s.rows() * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / cols, col = i % cols;
    const int64_t ox = row % s.out_width, oy = (row / s.out_width) % s.out_height;
    const int64_t b = row / (s.out_width * s.out_height);
    const int64_t kx = col % s.kernel, ky = (col / s.kernel) % s.kernel, c = col / (s.kernel * s.kernel);
    const int64_t iy = oy * s.stride - s.padding + ky, ix = ox * s.stride - s.padding + kx;
    const bool inside = iy >= 0 && iy < s.height && ix >= 0 && ix < s.width;
    patches[i] = inside ? images[((b * s.channels + c) * s.height + iy) * s.width + ix] : from_f32<T>(0.0f);
  }
}

// One thread per image element: the output positions whose window covers it, in increasing
// (oy, ox) order, i.e. increasing patch row.
template <typename T>
__global__ void col2im_kernel(ConvShape s, const T* __restrict__ patches, T* __restrict__ images) {
  const int64_t n = s.batch * s.channels * s.height * s.width, cols = s.cols();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t ix = i % s.width, iy = (i / s.width) % s.height;
    const int64_t c = (i / (s.width * s.height)) % s.channels, b = i / (s.width * s.height * s.channels);
    // oy covers iy when 0 <= iy + padding - oy * stride < kernel.
    const int64_t y_hi = (iy + s.padding) / s.stride, x_hi = (ix + s.padding) / s.stride;
    const int64_t y_from = iy + s.padding - s.kernel + 1, x_from = ix + s.padding - s.kernel + 1;
    const int64_t y_lo = y_from > 0 ? (y_from + s.stride - 1) / s.stride : 0;
    const int64_t x_lo = x_from > 0 ? (x_from + s.stride - 1) / s.stride : 0;
    float acc = 0.0f;
    for (int64_t oy = y_lo; oy <= y_hi && oy < s.out_height; ++oy) {
      const int64_t ky = iy + s.padding - oy * s.stride;
      if (ky >= s.kernel) continue;
      for (int64_t ox = x_lo; ox <= x_hi && ox < s.out_width; ++ox) {
        const int64_t kx = ix + s.padding - ox * s.stride;
        if (kx >= s.kernel) continue;
        const int64_t row = (b * s.out_height + oy) * s.out_width + ox;
        acc += to_f32(patches[row * cols + (c * s.kernel + ky) * s.kernel + kx]);
      }
    }
    images[i] = from_f32<T>(acc);
  }
}

template <typename T>
__global__ void transpose_batched_kernel(int64_t batch, int64_t rows, int64_t cols, const T* __restrict__ src,
                                         T* __restrict__ dst) {
  const int64_t n = batch * rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    // i indexes dst [b, c, r]: consecutive threads write consecutive elements.
    const int64_t r = i % rows, c = (i / rows) % cols, b = i / (rows * cols);
    dst[i] = src[(b * rows + r) * cols + c];
  }
}

}  // namespace

template <typename T>
void im2col(cudaStream_t stream, const ConvShape& s, const T* images, T* patches) {
  const int64_t n = s.rows() * s.cols();
  if (n <= 0) return;
  im2col_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(s, images, patches);
  PF_CHECK_LAUNCH("im2col");
}

template <typename T>
void col2im(cudaStream_t stream, const ConvShape& s, const T* patches, T* images) {
  const int64_t n = s.batch * s.channels * s.height * s.width;
  if (n <= 0) return;
  col2im_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(s, patches, images);
  PF_CHECK_LAUNCH("col2im");
}

template <typename T>
void transpose_batched(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, const T* src, T* dst) {
  const int64_t n = batch * rows * cols;
  if (n <= 0) return;
  transpose_batched_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(batch, rows, cols,
                                                                                                 src, dst);
  PF_CHECK_LAUNCH("transpose_batched");
}

#define PF_INSTANTIATE(T)                                                                   \
  template void im2col<T>(cudaStream_t, const ConvShape&, const T*, T*);                    \
  template void col2im<T>(cudaStream_t, const ConvShape&, const T*, T*);                    \
  template void transpose_batched<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, T*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
