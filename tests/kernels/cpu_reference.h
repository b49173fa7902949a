// Helpers to drive the CPU layers as references for the GPU kernels.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/kernels/cuda/types.h"
#include "runtime/layers/layer.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/tolerances.h"

namespace pf::test {

template <typename T>
constexpr bool kIsBf16 = std::is_same_v<T, cuda::bf16>;

// The tolerance for T.
template <typename T>
Tolerance pick(Tolerance f32, Tolerance bf16) {
  return kIsBf16<T> ? bf16 : f32;
}

// Values a T run sees: unchanged for float, rounded to bf16 for bf16.
template <typename T>
std::vector<float> as_stored(const std::vector<float>& v) {
  return kIsBf16<T> ? round_bf16(v) : v;
}

inline void set_value(Parameter* p, const std::vector<float>& v) {
  std::memcpy(p->value.f32(), v.data(), v.size() * sizeof(float));
}

inline Tensor tensor(const Shape& shape, const std::vector<float>& v) { return Tensor::from_vector(shape, v); }

}  // namespace pf::test
