// Eight-float vectors through the GCC/Clang vector extension: one AVX register on the default
// build (-march=x86-64-v3), two SSE halves on the portable one. The row kernels use them for
// reductions, which GCC does not vectorise on its own (that would reorder the float sums); here
// the order is written down: lane j sums elements j, j + 8, j + 16, ..., and sum8 adds the lanes
// in one fixed tree, so results are the same on every run of a given build.
// Without AVX, GCC and Clang warn (-Wpsabi) that passing such a vector by value changes the ABI;
// these helpers are inline and never cross a library boundary, so a file using them turns the
// warning off (PF_VEC8_NO_PSABI_WARNING, before its first use).
#pragma once

#include <cstring>

#define PF_VEC8_NO_PSABI_WARNING _Pragma("GCC diagnostic ignored \"-Wpsabi\"")

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace pf::cpu {

typedef float v8f __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));  // unaligned load
  return v;
}

inline void store8(float* p, const v8f& v) { std::memcpy(p, &v, sizeof(v)); }

inline v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }

// ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
inline float sum8(const v8f& v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

}  // namespace pf::cpu

#pragma GCC diagnostic pop
