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
