// Pooling over feature maps (runtime/layers/pooling.cc), x [planes = batch * channels, h, w]:
//  * pool2d: max or average over kernel x kernel windows with `stride`, no padding; y [planes, oh, ow].
//    Max keeps the argmax (the index within the plane, int32; the first maximum in window order, or
//    the first NaN) for B. B gathers, for each input element, the terms of the windows covering it in
//    output order (the CPU's order of adding them): no atomics, fp32 bitwise the CPU's.
//  * global_avg_pool: y [planes] = the mean over `spatial` values (fixed-order block sum); B spreads
//    dy / spatial.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct PoolShape {
  int64_t planes = 0, height = 0, width = 0, kernel = 1, stride = 1;
  PF_HD int64_t out_height() const { return (height - kernel) / stride + 1; }
  PF_HD int64_t out_width() const { return (width - kernel) / stride + 1; }
};

// argmax is written for max pooling and may be null for average pooling.
template <typename T>
void pool2d_forward(cudaStream_t stream, const PoolShape& shape, bool max, const T* x, T* y, int32_t* argmax);
// dx written; argmax as the forward wrote it (max pooling only).
template <typename T>
void pool2d_backward(cudaStream_t stream, const PoolShape& shape, bool max, const T* dy, const int32_t* argmax, T* dx);

template <typename T>
void global_avg_pool_forward(cudaStream_t stream, int64_t planes, int64_t spatial, const T* x, T* y);
template <typename T>
void global_avg_pool_backward(cudaStream_t stream, int64_t planes, int64_t spatial, const T* dy, T* dx);

}  // namespace pf::cuda
