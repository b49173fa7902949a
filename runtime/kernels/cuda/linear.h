// Linear layer on the GPU (runtime/layers/linear.cc): y = x W^T + b, row-major,
// x [rows, in], W [out, in], b [out], y [rows, out]. Parameter values are T (the fp32 master for
// T = float, the bf16 copy for T = bf16); gradients are fp32 and ACCUMULATED (+=) by W, as on the
// CPU; B writes dx.
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/gemm.h"
#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct LinearOptions {
  GemmOptions gemm;
  // Forward with a bias through cuBLASLt's BIAS epilogue (one kernel) instead of the reference
  // path (fill y with the bias, then gemm with beta = 1, as the CPU does). Falls back to the
  // reference path when cuBLASLt has no algorithm for the case.
  bool lt_bias_epilogue = true;
  // linear_gelu_forward through cuBLASLt's GELU_AUX_BIAS epilogue (cuBLASLt's own GELU, which may
  // differ from element_ops.h's in the last bits). Off until verified on a GPU against the
  // reference (tests/kernels/linear_gpu_test).
  bool lt_gelu_epilogue = false;
};

template <typename T>
void linear_forward(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x, const T* weight,
                    const T* bias, T* y, const LinearOptions& options = {});

// pre = x W^T + b (saved for the GELU backward), y = GELU(pre). bias must not be null.
template <typename T>
void linear_gelu_forward(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                         const T* weight, const T* bias, T* pre, T* y, const LinearOptions& options = {});

// dx = dy W (written).
template <typename T>
void linear_backward_input(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* dy,
                           const T* weight, T* dx, const LinearOptions& options = {});

// dW += dy^T x (fp32 accumulation into the fp32 gradient); db += column sums of dy (nullable).
template <typename T>
void linear_backward_weight(cudaStream_t stream, int64_t rows, int64_t in, int64_t out, const T* x,
                            const T* dy, float* dweight, float* dbias, const LinearOptions& options = {});

}  // namespace pf::cuda
