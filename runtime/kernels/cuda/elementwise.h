// Elementwise kernels: dtype conversion, residual add, bias, ReLU, GELU, SwiGLU. Raw device pointers,
// enqueued on `stream`, n = element count. T is float or bf16 (fp32 math either way). Launch
// errors throw pf::Error(kCudaError).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// f32 <-> bf16, round to nearest even (runtime/tensor/dtype.cc).
void convert_f32_to_bf16(cudaStream_t stream, int64_t n, const float* in, bf16* out);
void convert_bf16_to_f32(cudaStream_t stream, int64_t n, const bf16* in, float* out);

// out = a + b (out may alias a or b). The residual connection, forward and backward.
template <typename T>
void add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* out);

// y[r, c] = bias[c] for a [rows, cols] matrix (the Linear forward's first step, as on the CPU:
// bias first, then the product with beta = 1).
template <typename T>
void fill_rows_with_bias(cudaStream_t stream, int64_t rows, int64_t cols, const T* bias, T* y);

// dbias[c] += sum_r dy[r, c] (fp32), deterministic (block_reduce.cuh's column sums, no atomics).
template <typename T>
void bias_backward(cudaStream_t stream, int64_t rows, int64_t cols, const T* dy, float* dbias);

// ReLU: y = max(x, 0); dx = x > 0 ? dy : 0. GELU (tanh approximation, element_ops.h):
// y = gelu(x); dx = dy * gelu'(x). x is the saved forward input. dx may alias dy.
template <typename T>
void relu_forward(cudaStream_t stream, int64_t n, const T* x, T* y);
template <typename T>
void relu_backward(cudaStream_t stream, int64_t n, const T* x, const T* dy, T* dx);
template <typename T>
void gelu_forward(cudaStream_t stream, int64_t n, const T* x, T* y);
template <typename T>
void gelu_backward(cudaStream_t stream, int64_t n, const T* x, const T* dy, T* dx);

// SwiGLU (Llama's gated MLP activation; element_ops.h): x [rows, 2 half] = [a | u] ->
// y [rows, half] = silu(a) u; B writes dx [rows, 2 half] = [da | du] from the saved x.
template <typename T>
void swiglu_forward(cudaStream_t stream, int64_t rows, int64_t half, const T* x, T* y);
template <typename T>
void swiglu_backward(cudaStream_t stream, int64_t rows, int64_t half, const T* x, const T* dy, T* dx);

}  // namespace pf::cuda
