#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/elementwise.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// One grid-stride loop for every elementwise op: out[i] = f(i).
template <typename Fn>
__global__ void for_each_kernel(int64_t n, Fn f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <typename Fn>
void for_each(cudaStream_t stream, int64_t n, Fn f, const char* name) {
  if (n <= 0) return;
  for_each_kernel<<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(n, f);
  PF_CHECK_LAUNCH(name);
}

// Functors (not extended lambdas: nvcc needs --extended-lambda for those).
struct ToBf16 {
  const float* in;
  bf16* out;
  __device__ void operator()(int64_t i) const { out[i] = from_f32<bf16>(in[i]); }
};
struct ToF32 {
  const bf16* in;
  float* out;
  __device__ void operator()(int64_t i) const { out[i] = to_f32(in[i]); }
};
template <typename T>
struct Add {
  const T* a;
  const T* b;
  T* out;
  __device__ void operator()(int64_t i) const { out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i])); }
};
template <typename T>
struct FillBias {
  const T* bias;
  T* y;
  int64_t cols;
  __device__ void operator()(int64_t i) const { y[i] = bias[i % cols]; }
};
template <typename T>
struct ReluF {
  const T* x;
  T* y;
  __device__ void operator()(int64_t i) const { y[i] = from_f32<T>(relu_forward(to_f32(x[i]))); }
};
template <typename T>
struct ReluB {
  const T* x;
  const T* dy;
  T* dx;
  __device__ void operator()(int64_t i) const {
    dx[i] = from_f32<T>(relu_backward(to_f32(x[i]), to_f32(dy[i])));
  }
};
template <typename T>
struct GeluF {
  const T* x;
  T* y;
  __device__ void operator()(int64_t i) const { y[i] = from_f32<T>(gelu_forward(to_f32(x[i]))); }
};
template <typename T>
struct GeluB {
  const T* x;
  const T* dy;
  T* dx;
  __device__ void operator()(int64_t i) const {
    dx[i] = from_f32<T>(gelu_backward(to_f32(x[i]), to_f32(dy[i])));
  }
};
// SwiGLU over rows of x = [a | u] (width 2 half): one element i of y [rows, half] per call.
template <typename T>
struct SwigluF {
  const T* x;
  T* y;
  int64_t half;
  __device__ void operator()(int64_t i) const {
    const T* row = x + (i / half) * 2 * half;
    const int64_t c = i % half;
    y[i] = from_f32<T>(swiglu_forward(to_f32(row[c]), to_f32(row[half + c])));
  }
};
template <typename T>
struct SwigluB {
  const T* x;
  const T* dy;
  T* dx;
  int64_t half;
  __device__ void operator()(int64_t i) const {
    const int64_t at = (i / half) * 2 * half + i % half;  // a's position; u's is at + half
    const float a = to_f32(x[at]), u = to_f32(x[at + half]), g = to_f32(dy[i]), s = swiglu_sigmoid(a);
    dx[at] = from_f32<T>(swiglu_gate_grad(a, u, s, g));
    dx[at + half] = from_f32<T>(swiglu_up_grad(a, s, g));
  }
};
template <typename T>
struct BiasGradTerm {
  const T* dy;
  int64_t cols;
  __device__ void operator()(int64_t r, int64_t c, float (&v)[1]) const { v[0] = to_f32(dy[r * cols + c]); }
};

}  // namespace

void convert_f32_to_bf16(cudaStream_t stream, int64_t n, const float* in, bf16* out) {
  for_each(stream, n, ToBf16{in, out}, "convert_f32_to_bf16");
}
void convert_bf16_to_f32(cudaStream_t stream, int64_t n, const bf16* in, float* out) {
  for_each(stream, n, ToF32{in, out}, "convert_bf16_to_f32");
}

template <typename T>
void add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* out) {
  for_each(stream, n, Add<T>{a, b, out}, "add");
}

template <typename T>
void fill_rows_with_bias(cudaStream_t stream, int64_t rows, int64_t cols, const T* bias, T* y) {
  for_each(stream, rows * cols, FillBias<T>{bias, y, cols}, "fill_rows_with_bias");
}

template <typename T>
void bias_backward(cudaStream_t stream, int64_t rows, int64_t cols, const T* dy, float* dbias) {
  if (rows <= 0 || cols <= 0) return;
  const dim3 block(detail::kColTile, detail::kRowLanes);
  const unsigned grid = static_cast<unsigned>((cols + detail::kColTile - 1) / detail::kColTile);
  detail::ColumnOutputs<1> outputs{{dbias}};
  detail::column_sum_kernel<1><<<grid, block, 0, stream>>>(rows, cols, BiasGradTerm<T>{dy, cols}, outputs);
  PF_CHECK_LAUNCH("bias_backward");
}

template <typename T>
void relu_forward(cudaStream_t stream, int64_t n, const T* x, T* y) {
  for_each(stream, n, ReluF<T>{x, y}, "relu_forward");
}
template <typename T>
void relu_backward(cudaStream_t stream, int64_t n, const T* x, const T* dy, T* dx) {
  for_each(stream, n, ReluB<T>{x, dy, dx}, "relu_backward");
}
template <typename T>
void gelu_forward(cudaStream_t stream, int64_t n, const T* x, T* y) {
  for_each(stream, n, GeluF<T>{x, y}, "gelu_forward");
}
template <typename T>
void gelu_backward(cudaStream_t stream, int64_t n, const T* x, const T* dy, T* dx) {
  for_each(stream, n, GeluB<T>{x, dy, dx}, "gelu_backward");
}

template <typename T>
void swiglu_forward(cudaStream_t stream, int64_t rows, int64_t half, const T* x, T* y) {
  for_each(stream, rows * half, SwigluF<T>{x, y, half}, "swiglu_forward");
}
template <typename T>
void swiglu_backward(cudaStream_t stream, int64_t rows, int64_t half, const T* x, const T* dy, T* dx) {
  for_each(stream, rows * half, SwigluB<T>{x, dy, dx, half}, "swiglu_backward");
}

#define PF_INSTANTIATE(T)                                                                        \
  template void swiglu_forward<T>(cudaStream_t, int64_t, int64_t, const T*, T*);                 \
  template void swiglu_backward<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, T*);      \
  template void add<T>(cudaStream_t, int64_t, const T*, const T*, T*);                           \
  template void fill_rows_with_bias<T>(cudaStream_t, int64_t, int64_t, const T*, T*);            \
  template void bias_backward<T>(cudaStream_t, int64_t, int64_t, const T*, float*);              \
  template void relu_forward<T>(cudaStream_t, int64_t, const T*, T*);                            \
  template void relu_backward<T>(cudaStream_t, int64_t, const T*, const T*, T*);                 \
  template void gelu_forward<T>(cudaStream_t, int64_t, const T*, T*);                            \
  template void gelu_backward<T>(cudaStream_t, int64_t, const T*, const T*, T*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
