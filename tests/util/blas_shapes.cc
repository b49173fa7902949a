#include "tests/util/blas_shapes.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/blas.h"

namespace pf::test {
namespace {

std::vector<float> pattern(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>((x >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

}  // namespace

bool blas_is_shape_independent() {
  const int64_t M = 32, N = 128, K = 16;
  const std::vector<float> a = pattern(M * K, 91), b = pattern(K * N, 92);
  std::vector<float> whole(M * N), part(M * N);
  cpu::gemm(false, false, M, N, K, 0.25f, a.data(), b.data(), 0.0f, whole.data());
  for (int64_t r0 = 1; r0 < M; ++r0) {
    cpu::gemm(false, false, M - r0, N, K, 0.25f, a.data() + r0 * K, b.data(), 0.0f, part.data());
    if (std::memcmp(part.data(), whole.data() + r0 * N, static_cast<size_t>((M - r0) * N) * sizeof(float)) != 0)
      return false;
  }
  for (int64_t n = 1; n < N; ++n) {
    cpu::gemm(false, false, M, n, K, 0.25f, a.data(), K, b.data(), N, 0.0f, part.data(), N);
    for (int64_t r = 0; r < M; ++r)
      if (std::memcmp(part.data() + r * N, whole.data() + r * N, static_cast<size_t>(n) * sizeof(float)) != 0)
        return false;
  }
  return true;
}

}  // namespace pf::test
