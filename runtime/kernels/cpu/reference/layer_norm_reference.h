// LayerNorm over [rows, dim] rows as the layer computed it before the one-pass kernels
// (runtime/kernels/cpu/layer_norm.h): the forward in two scalar passes (the mean, then the
// variance of the centred values), the input gradient with scalar reductions. Same outputs and
// argument meanings as the kernels, without the folded residual.
#pragma once

#include <cstdint>

namespace pf::cpu::reference {

void layer_norm_forward(int64_t rows, int64_t dim, const float* x, const float* weight, const float* bias,
                        float eps, float* y, float* xhat, float* rstd);

void layer_norm_backward_input(int64_t rows, int64_t dim, const float* xhat, const float* rstd,
                               const float* weight, const float* dy, float* dx);

}  // namespace pf::cpu::reference
