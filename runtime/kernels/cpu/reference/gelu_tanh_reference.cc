#include "runtime/kernels/cpu/reference/gelu_tanh_reference.h"

#include "runtime/kernels/cpu/fast_math.h"

namespace pf::cpu::reference {

namespace {

float tanh_of_u(float v) { return fast_tanh(kGeluSqrt2OverPi * (v + kGeluCubic * v * v * v)); }

}  // namespace

void gelu_tanh_forward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + tanh_of_u(x[i]));
}

void gelu_tanh_backward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], t = tanh_of_u(v);
    const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

}  // namespace pf::cpu::reference
