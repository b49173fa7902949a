// GPT-2's GELU as the kernels computed it before runtime/kernels/cpu/gelu.h went through
// v * sigmoid(2u): 0.5 v (1 + fast_tanh(u)) and the derivative 0.5 (1 + t) + 0.5 v (1 - t^2) u',
// plain loops over the scalar functions. The same function: the kernels agree with it to 1e-6
// (forward) and 2e-6 (derivative) on [-12, 12] (tests/kernels/cpu:epilogue_kernel_test);
// bench/kernels:epilogue_bench times them against it.
#pragma once

#include <cstdint>

namespace pf::cpu::reference {

void gelu_tanh_forward(int64_t n, const float* x, float* y);
void gelu_tanh_backward(int64_t n, const float* x, const float* dy, float* dx);

}  // namespace pf::cpu::reference
