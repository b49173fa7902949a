// GPT-2's tanh-approximated GELU on the CPU (cpu::gelu and cpu::gelu_grad in fast_math.h, shared
// with the CUDA kernels), alone and with the neighbouring epilogue work folded into the same pass:
// the Linear's bias in the forward, the bias-gradient reduction in the backward. The loops run
// eight lanes at a time (fast_math_lanes.h; every element gets the scalar function's bits) and
// column sums in row order, so results are deterministic.
#pragma once

#include <cstdint>

#include "runtime/kernels/cpu/fast_math.h"

namespace pf::cpu {

// y = gelu(x) and dx = dy * gelu'(x) over n elements.
void gelu_forward(int64_t n, const float* x, float* y);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx);

// pre[r, c] += bias[c] in place and post = gelu(pre), one pass over [rows, cols] (the epilogue of
// a GEMM run with beta = 0). The layers do not use it: OpenBLAS clears C for beta = 0 anyway, so
// broadcasting the bias into C and accumulating with beta = 1 (Linear) and then one GELU pass
// measured as fast or faster (bench/kernels:epilogue_bench, fc_bias_gelu_forward).
void bias_gelu_forward(int64_t rows, int64_t cols, const float* bias, float* pre, float* post);

// dx = dy * gelu'(x) over [rows, cols] and, in the same pass, column_sums[c] = sum_r dx[r, c]
// (overwritten, summed in row order): the bias gradient of the Linear before the GELU.
void gelu_backward_column_sums(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx,
                               float* column_sums);

}  // namespace pf::cpu
