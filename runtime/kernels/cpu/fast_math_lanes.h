// fast_math.h's exp, tanh and GELU on eight lanes at once (vec8.h's vectors), for the CPU kernels' loops:
// the same operations in the same order, so every lane gives the scalar function's bits (checked by
// tests/runtime/fast_math_test over a dense sweep of floats), with the clamps as max/min instructions
// where AVX has them (GCC compiles the scalar form's selects to slower blends; ~25% faster for exp,
// and a plain loop over the scalar GELU ran about half as fast as gelu_lanes).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/vec8.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pf::cpu {

typedef int32_t v8i __attribute__((vector_size(32)));

// The larger / smaller of each lane and a constant (NaN lanes stay NaN either way). Vectors go in
// by reference, as in vec8.h: no ABI note where the build has no AVX.
inline v8f max_lanes(const v8f& x, float c) {
#if defined(__AVX__)
  return reinterpret_cast<v8f>(_mm256_max_ps(_mm256_set1_ps(c), reinterpret_cast<__m256>(x)));
#else
  return x < c ? splat8(c) : x;
#endif
}

inline v8f min_lanes(const v8f& x, float c) {
#if defined(__AVX__)
  return reinterpret_cast<v8f>(_mm256_min_ps(_mm256_set1_ps(c), reinterpret_cast<__m256>(x)));
#else
  return x > c ? splat8(c) : x;
#endif
}

// fast_exp per lane.
inline v8f exp_lanes(const v8f& in) {
  const v8f x = min_lanes(max_lanes(in, -87.3f), 88.0f);
  const v8f n = exp_power_of_two(x);
  const v8f p = exp_of_remainder(x, n);
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// fast_tanh per lane.
inline v8f tanh_lanes(const v8f& x) {
  const v8f ax = x < 0.0f ? -x : x;
  const v8f t = exp_lanes(-2.0f * ax);
  const v8f magnitude = (1.0f - t) / (1.0f + t);
  return x < 0.0f ? -magnitude : magnitude;
}

// gelu_exponent, gelu and gelu_grad per lane.
inline v8f gelu_exponent_lanes(const v8f& v) {
  return min_lanes(-2.0f * kGeluSqrt2OverPi * (v + kGeluCubic * v * v * v), kGeluExponentCap);
}

inline v8f gelu_lanes(const v8f& v) {
  const v8f a = gelu_exponent_lanes(v);
  return a >= kGeluExponentCap ? v8f{} : v / (1.0f + exp_lanes(a));
}

inline v8f gelu_grad_lanes(const v8f& v, const v8f& dy) {
  const v8f a = gelu_exponent_lanes(v);
  const v8f e = exp_lanes(a);
  const v8f s = 1.0f / (1.0f + e);
  const v8f w = min_lanes(v, kGeluLinearFrom);
  const v8f du2 = 2.0f * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * w * w);
  return a >= kGeluExponentCap ? dy * 0.0f : dy * (s * (1.0f + du2 * w * e * s));
}

}  // namespace pf::cpu

#pragma GCC diagnostic pop
