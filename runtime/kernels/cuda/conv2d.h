// 2-D convolution by im2col + cuBLAS (runtime/layers/conv2d.cc): the patch matrix, its gradient's
// way back into the image, and the transposes between the GEMM's rows and feature-map planes. The
// products themselves are gemm.h's; the layer composes them exactly as the CPU layer does:
//   F: P = im2col(x); Y' = bias rows, then += P W^T; y = planes(Y')
//   B: dY' = rows(dy) (kept for W); dP = dY' W; dx = col2im(dP)
//   W: P = im2col(x) again; dW += dY'^T P; db += column sums of dY'
// Images are [batch, channels, height, width]; P is [batch * out_h * out_w, channels * k * k], one
// row per output position in (b, y, x) order and one column per (c, ky, kx), zero where the window
// leaves the image.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct ConvShape {
  int64_t batch = 0, channels = 0, height = 0, width = 0;
  int64_t kernel = 1, stride = 1, padding = 0;
  int64_t out_height = 0, out_width = 0;
  PF_HD int64_t rows() const { return batch * out_height * out_width; }
  PF_HD int64_t cols() const { return channels * kernel * kernel; }
};

template <typename T>
void im2col(cudaStream_t stream, const ConvShape& shape, const T* images, T* patches);

// dx[b, c, iy, ix] = the sum of the patch-matrix entries that image element was copied to, added in
// increasing row order (the CPU's order: each input element gathers its own terms, no atomics), so
// fp32 results are bitwise the CPU's. dx is written.
template <typename T>
void col2im(cudaStream_t stream, const ConvShape& shape, const T* patches, T* images);

// dst[b, c, r] = src[b, r, c] for `batch` matrices src [rows, cols] (Y' rows -> feature-map planes,
// and back with rows and cols swapped).
template <typename T>
void transpose_batched(cudaStream_t stream, int64_t batch, int64_t rows, int64_t cols, const T* src, T* dst);

}  // namespace pf::cuda
