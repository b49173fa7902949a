// The per-element math of the CUDA kernels, as __host__ __device__ functions. Every kernel computes
// its elements through these functions, and tests/kernels/element_ops_test checks them on the CPU
// against the CPU layers (runtime/layers, runtime/optim, runtime/tensor/dtype.cc, and
// runtime/kernels/cpu/fast_math.h): host-compiled, they reproduce the CPU results bitwise. On the
// GPU, nvcc contracts a*b+c into FMAs, so device results differ from the CPU in the last bits only
// (tolerances: tests/kernels/tolerances.h).
//
// Plain C++ (no CUDA headers) so CPU-only code can include it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// ---- bit casts ---------------------------------------------------------------------------------

PF_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

PF_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
#endif
}

// ---- bf16 (runtime/tensor/dtype.cc: round to nearest even; NaN stays a quiet NaN) ---------------

PF_HD uint16_t f32_to_bf16_bits(float value) {
  const uint32_t bits = float_to_bits(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

PF_HD float bf16_bits_to_f32(uint16_t bits) { return bits_to_float(static_cast<uint32_t>(bits) << 16); }

// Loads and stores of the storage types (compute is fp32).
PF_HD float to_f32(float x) { return x; }
PF_HD float to_f32(bf16 x) { return bf16_bits_to_f32(x.bits); }
template <typename T>
PF_HD T from_f32(float x);
template <>
PF_HD float from_f32<float>(float x) { return x; }
template <>
PF_HD bf16 from_f32<bf16>(float x) { return bf16{f32_to_bf16_bits(x)}; }

// ---- exp: the CPU's own function (host and device under nvcc) ---------------------------------

using pf::cpu::fast_exp;

// ---- activations (runtime/layers/activations.cc) ------------------------------------------------

// NaN passes through, as in PyTorch and the CPU's loops (activations.cc).
PF_HD float relu_forward(float x) { return !(x <= 0.0f) ? x : 0.0f; }
PF_HD float relu_backward(float x, float dy) { return !(x <= 0.0f) ? dy : 0.0f; }

// GPT-2's tanh GELU: the CPU's own functions (fast_math.h), so both give the same bits.
PF_HD float gelu_forward(float v) { return pf::cpu::gelu(v); }

// dy * d/dv gelu(v), v = the pre-activation.
PF_HD float gelu_backward(float v, float dy) { return pf::cpu::gelu_grad(v, dy); }

// ---- LayerNorm (runtime/layers/layer_norm.cc; biased variance, two passes) ----------------------
// Forward: mean = sum(x) * inv_dim; rstd = 1 / sqrt(sum((x - mean)^2) * inv_dim + eps);
// xhat = (x - mean) * rstd; y = xhat * w + b.
// Input gradient: d = dy * w; dx = rstd * (d - mean(d) - xhat * mean(d * xhat)).
// Weight gradients: dw += dy * xhat, db += dy (summed over rows).

PF_HD float layer_norm_rstd(float sum_sq_centred, float inv_dim, float eps) {
  return 1.0f / sqrtf(sum_sq_centred * inv_dim + eps);
}
PF_HD float layer_norm_xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
PF_HD float layer_norm_output(float xhat, float w, float b) { return xhat * w + b; }
PF_HD float layer_norm_input_grad(float dy, float w, float xhat, float rstd, float mean_d,
                                  float mean_d_xhat) {
  return rstd * (dy * w - mean_d - xhat * mean_d_xhat);
}

// ---- RMSNorm and GroupNorm (runtime/layers/rms_norm.cc, group_norm.cc) ---------------------------
// RMSNorm: rstd = 1 / sqrt(sum(x^2) / dim + eps); xhat = x * rstd; y = w * xhat;
// dx = rstd * (dy * w - xhat * mean(dy * w * xhat)); dw += dy * xhat.
// GroupNorm (per sample and group of count values): rstd = 1 / sqrt(sum((x - mean)^2) / count + eps),
// xhat = (x - mean) * rstd, y = xhat * w[c] + b[c]; dx = rstd * (dy * w[c] - mean(g) - xhat * mean(g xhat)).

// Both: rstd = 1 / sqrt(sum_sq / count + eps) (sum_sq: of x for RMSNorm, of x - mean for GroupNorm).
PF_HD float norm_rstd(float sum_sq, float count, float eps) { return 1.0f / sqrtf(sum_sq / count + eps); }
PF_HD float rms_norm_input_grad(float dy, float w, float xhat, float rstd, float mean_dot) {
  return rstd * (dy * w - xhat * mean_dot);
}
PF_HD float group_norm_input_grad(float dy, float w, float xhat, float rstd, float mean_g, float mean_gx) {
  return rstd * (dy * w - mean_g - xhat * mean_gx);
}

// ---- SwiGLU (runtime/layers/activations.cc): x = [a | u], y = silu(a) u ---------------------------
// s = 1 / (1 + fast_exp(-a)); y = a / (1 + fast_exp(-a)) * u;
// da = dy u s (1 + a (1 - s)); du = dy a s.

PF_HD float swiglu_forward(float a, float u) { return a / (1.0f + fast_exp(-a)) * u; }
PF_HD float swiglu_sigmoid(float a) { return 1.0f / (1.0f + fast_exp(-a)); }
PF_HD float swiglu_gate_grad(float a, float u, float s, float dy) { return dy * u * s * (1.0f + a * (1.0f - s)); }
PF_HD float swiglu_up_grad(float a, float s, float dy) { return dy * a * s; }

// ---- causal softmax of attention scores (runtime/layers/attention.cc) ---------------------------
// Row i of a [T, T] score matrix keeps columns j <= i: p_j = fast_exp(s_j - max) * (1 / sum), the
// masked columns are 0. Backward: ds_j = p_j (dp_j - sum_k p_k dp_k) on j <= i, 0 elsewhere.

PF_HD float softmax_prob(float score, float row_max, float inv_sum) {
  return fast_exp(score - row_max) * inv_sum;
}
PF_HD float softmax_grad(float p, float dp, float dot) { return p * (dp - dot); }

// ---- cross-entropy (runtime/layers/cross_entropy.cc; fp64 inside, mean over all rows) -----------
// loss_row = max + log(sum_c exp(x_c - max)) - x_target; loss = scale * sum(loss_row) / rows;
// grad = scale / rows * (softmax(x)_c - [c == target]).

PF_HD double cross_entropy_exp(float x, float row_max) {
  return exp(static_cast<double>(x) - row_max);
}
PF_HD double cross_entropy_row_loss(float row_max, double sum_exp, float x_target) {
  return static_cast<double>(row_max) + log(sum_exp) - static_cast<double>(x_target);
}
PF_HD float cross_entropy_grad(float x, float row_max, double inv_sum, bool is_target, double coef) {
  const double p = cross_entropy_exp(x, row_max) * inv_sum;
  return static_cast<float>(coef * (is_target ? p - 1.0 : p));
}

// ---- AdamW (runtime/optim/adamw.cc; PyTorch's torch.optim.AdamW) ---------------------------------
// w *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; w -= lr/(1-b1^t) m / (sqrt(v)/sqrt(1-b2^t) + eps)

struct AdamWScalars {
  float b1, b2, eps;
  float decay;       // 1 - lr * weight_decay
  float step_size;   // lr / (1 - b1^t)
  float bias2_sqrt;  // sqrt(1 - b2^t)
};

// Host-side: the per-step scalars exactly as the CPU AdamW computes them (`step` counts from 1).
inline AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay,
                                  int64_t step) {
  AdamWScalars s;
  s.b1 = beta1;
  s.b2 = beta2;
  s.eps = eps;
  s.decay = 1.0f - lr * weight_decay;
  const float bias1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta1), static_cast<double>(step)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(beta2), static_cast<double>(step)));
  s.step_size = lr / bias1;
  s.bias2_sqrt = std::sqrt(bias2);
  return s;
}

PF_HD void adamw_update(float& w, float g, float& m, float& v, const AdamWScalars& s) {
  w *= s.decay;
  m = s.b1 * m + (1.0f - s.b1) * g;
  v = s.b2 * v + (1.0f - s.b2) * g * g;
  w -= s.step_size * m / (sqrtf(v) / s.bias2_sqrt + s.eps);
}

}  // namespace pf::cuda
