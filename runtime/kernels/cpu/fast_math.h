// exp, tanh and GPT-2's GELU as inline float code with no library calls, so loops over them
// vectorise (libm's expf/tanhf are scalar calls; they took ~45% of a GPT training step before these
// existed). Accuracy: exp within 2 ulp over the float range; tanh within 2e-7 absolute; GELU within
// 6e-7 and its derivative within 3e-7 absolute of the exact tanh formula. Results are deterministic
// for a given binary, which is all bitwise reproducibility needs.
//
// The CUDA kernels use the very same functions (runtime/kernels/cuda/element_ops.h): under nvcc they
// are __host__ __device__.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PF_FAST_MATH_FN __host__ __device__ inline
#else
#define PF_FAST_MATH_FN inline
#endif

namespace pf::cpu {

// fast_exp's two halves for an x already clamped, written once for a float and for eight lanes
// (fast_math_lanes.h), so both run the same operations: x = n ln2 + r, |r| <= ln2 / 2, n rounded
// to nearest by adding and removing 1.5 * 2^23 (floorf would stop vectorisation), ln2 split in two
// parts so n * ln2_hi is exact; then e^r by the Cephes expf minimax polynomial on [-ln2/2, ln2/2].
// Instantiated with eight-lane vectors, which the portable build (no AVX) returns in two SSE
// registers; GCC warns of that ABI change, which never crosses a library boundary here.
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
template <typename T>
PF_FAST_MATH_FN T exp_power_of_two(const T& x) {
  return (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
}

template <typename T>
PF_FAST_MATH_FN T exp_of_remainder(const T& x, const T& n) {
  const T r = x - n * 0.693359375f + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

// e^x, with x clamped to [-87.3, 88] (results stay finite and normal).
PF_FAST_MATH_FN float fast_exp(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  const float n = exp_power_of_two(x);
  const float p = exp_of_remainder(x, n);
  // 2^n from its exponent bits; n is an integer in [-126, 127], or NaN with x (then 0 is taken, so
  // the conversion is defined, and the result is NaN through p).
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n == n ? n : 0.0f) + 127) << 23;
#if defined(__CUDA_ARCH__)
  const float scale = __uint_as_float(bits);
#else
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
#endif
  return p * scale;
}

// tanh(x) = sign(x) (1 - e^{-2|x|}) / (1 + e^{-2|x|}).
PF_FAST_MATH_FN float fast_tanh(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = fast_exp(-2.0f * a);
  const float magnitude = (1.0f - t) / (1.0f + t);
  return x < 0.0f ? -magnitude : magnitude;
}

// GPT-2's tanh-approximated GELU, gelu(v) = 0.5 v (1 + tanh(u)), u = sqrt(2/pi) (v + 0.044715 v^3),
// computed as v * sigmoid(2u) = v / (1 + e^{-2u}) (the same function: 0.5 (1 + tanh(u)) =
// 1 / (1 + e^{-2u})): one exp and one division, about half the work of going through tanh.
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// Where -2u >= 80 (v <= -9.7) |gelu| < 2e-34 and |gelu'| < 4e-33: both are taken as 0, and e^{-2u}
// is never taken past e^80, so 1 / (1 + e^{-2u}) stays a normal float (no slow denormals).
constexpr float kGeluExponentCap = 80.0f;
// From v = 10 on, e^{-2u} <= e^{-87.3} (fast_exp's floor) and gelu' = 1 in float; the derivative's
// v-polynomial is taken at min(v, 10) so it cannot overflow for huge v.
constexpr float kGeluLinearFrom = 10.0f;

// The exponent -2u of gelu(v), capped.
PF_FAST_MATH_FN float gelu_exponent(float v) {
  const float a = -2.0f * kGeluSqrt2OverPi * (v + kGeluCubic * v * v * v);
  return a > kGeluExponentCap ? kGeluExponentCap : a;
}

// NaN in, NaN out (the comparisons below are false for NaN).
PF_FAST_MATH_FN float gelu(float v) {
  const float a = gelu_exponent(v);
  return a >= kGeluExponentCap ? 0.0f : v / (1.0f + fast_exp(a));
}

// dy * gelu'(v). With e = e^{-2u} and s = 1 / (1 + e): gelu' = s + v s (1 - s) 2u', and 1 - s = e s
// (no cancellation where s is near 1), so gelu' = s (1 + 2u' v e s).
PF_FAST_MATH_FN float gelu_grad(float v, float dy) {
  const float a = gelu_exponent(v);
  const float e = fast_exp(a);
  const float s = 1.0f / (1.0f + e);
  const float w = v > kGeluLinearFrom ? kGeluLinearFrom : v;
  const float du2 = 2.0f * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * w * w);
  return a >= kGeluExponentCap ? dy * 0.0f : dy * (s * (1.0f + du2 * w * e * s));
}

}  // namespace pf::cpu
