#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/blas.h"

namespace pf {
namespace {

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

TEST(Blas, GemmMatchesNaiveForEveryTransposeCombination) {
  const int64_t m = 7, n = 5, k = 9;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      auto a = random_vector(m * k, 1), b = random_vector(k * n, 2), c = random_vector(m * n, 3);
      std::vector<float> expect(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            float av = ta ? a[p * m + i] : a[i * k + p];
            float bv = tb ? b[j * k + p] : b[p * n + j];
            s += static_cast<double>(av) * bv;
          }
          expect[i * n + j] = static_cast<float>(0.5 * s + 2.0 * c[i * n + j]);
        }
      cpu::gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 2.0f, c.data());
      for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(c[i], expect[i], 1e-5) << ta << tb << i;
    }
  }
}

// The strided form on sub-matrices of wider rows equals the contiguous form on copies, bitwise, and
// leaves the rest of C's rows alone.
TEST(Blas, StridedGemmEqualsContiguousOnSubMatrices) {
  const int64_t m = 6, n = 5, k = 7, pad = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      const auto a = random_vector(ar * (ac + pad), 4), b = random_vector(br * (bc + pad), 5);
      auto c = random_vector(m * (n + pad), 6);
      std::vector<float> a2(ar * ac), b2(br * bc), c2(m * n);
      for (int64_t i = 0; i < ar; ++i) std::memcpy(&a2[i * ac], &a[i * (ac + pad)], ac * sizeof(float));
      for (int64_t i = 0; i < br; ++i) std::memcpy(&b2[i * bc], &b[i * (bc + pad)], bc * sizeof(float));
      for (int64_t i = 0; i < m; ++i) std::memcpy(&c2[i * n], &c[i * (n + pad)], n * sizeof(float));
      const auto before = c;
      cpu::gemm(ta, tb, m, n, k, 0.5f, a.data(), ac + pad, b.data(), bc + pad, 1.0f, c.data(), n + pad);
      cpu::gemm(ta, tb, m, n, k, 0.5f, a2.data(), b2.data(), 1.0f, c2.data());
      for (int64_t i = 0; i < m; ++i) {
        EXPECT_EQ(std::memcmp(&c[i * (n + pad)], &c2[i * n], n * sizeof(float)), 0) << ta << tb << " row " << i;
        for (int64_t j = n; j < n + pad; ++j) EXPECT_EQ(c[i * (n + pad) + j], before[i * (n + pad) + j]);
      }
    }
  }
}

TEST(Blas, ThreadCountIsPerThreadAndResultsDoNotDependOnIt) {
  const int64_t m = 256, n = 256, k = 256;
  auto a = random_vector(m * k, 4), b = random_vector(k * n, 5);
  std::vector<float> one(m * n), two(m * n);
  cpu::set_blas_threads_for_this_thread(1);
  EXPECT_EQ(cpu::blas_threads_for_this_thread(), 1);
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, one.data());
  cpu::set_blas_threads_for_this_thread(2);
  EXPECT_EQ(cpu::blas_threads_for_this_thread(), 2);
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, two.data());
  cpu::set_blas_threads_for_this_thread(1);
  // OpenBLAS splits sgemm over M/N blocks, never over K, so every element has the same sum order.
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace pf
