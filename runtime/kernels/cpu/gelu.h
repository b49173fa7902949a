// GPT-2's tanh-approximated GELU on the CPU, y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// alone and with the neighbouring epilogue work folded into the same pass: the Linear's bias in
// the forward, the bias-gradient reduction in the backward. Plain loops over inlined fast_tanh
// (fast_math.h), which GCC vectorises; column sums run in row order, so they are deterministic.
#pragma once

#include <cstdint>

#include "runtime/kernels/cpu/fast_math.h"

namespace pf::cpu {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

inline float gelu(float v) {
  const float t = fast_tanh(kGeluSqrt2OverPi * (v + kGeluCubic * v * v * v));
  return 0.5f * v * (1.0f + t);
}

// dy * gelu'(v).
inline float gelu_grad(float v, float dy) {
  const float t = fast_tanh(kGeluSqrt2OverPi * (v + kGeluCubic * v * v * v));
  const float dt = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
  return dy * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dt);
}

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
