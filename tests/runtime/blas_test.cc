#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/openblas_kernels.h"
#include "tests/util/blas_shapes.h"

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

// The thread count is set per calling thread, and a given count gives the same bits every time.
// Across counts: OpenBLAS splits sgemm over M/N blocks, never over K, so the sum order of an
// element does not change; the bits are the same where its kernels compute an element alike
// whatever the block's shape (tests/util/blas_shapes.h), else within 4e-6 relative to the
// largest element (sums of 256 products of values in [-1, 1]; measured 6.6e-7 on an AMD EPYC
// whose OpenBLAS picks its Zen kernels).
TEST(Blas, ThreadCountIsPerThreadAndResultsDoNotDependOnIt) {
  const int64_t m = 256, n = 256, k = 256;
  auto a = random_vector(m * k, 4), b = random_vector(k * n, 5);
  std::vector<float> one(m * n), two(m * n), two_again(m * n);
  cpu::set_blas_threads_for_this_thread(1);
  EXPECT_EQ(cpu::blas_threads_for_this_thread(), 1);
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, one.data());
  cpu::set_blas_threads_for_this_thread(2);
  EXPECT_EQ(cpu::blas_threads_for_this_thread(), 2);
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, two.data());
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, two_again.data());
  cpu::set_blas_threads_for_this_thread(1);
  EXPECT_EQ(std::memcmp(two.data(), two_again.data(), two.size() * sizeof(float)), 0);
  if (test::blas_is_shape_independent()) {
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
  } else {
    float largest = 0.0f, diff = 0.0f;
    for (size_t i = 0; i < one.size(); ++i) {
      largest = std::max(largest, std::fabs(one[i]));
      diff = std::max(diff, std::fabs(one[i] - two[i]));
    }
    std::cout << "BLAS products depend on their shape here: 1 vs 2 threads differ by at most " << diff
              << " (largest element " << largest << ")\n";
    EXPECT_LE(diff, 4e-6f * largest);
  }
}

}  // namespace
}  // namespace pf

// OpenBLAS's generic fallback (Prescott, SSE3) is replaced at load time where the CPU has AVX2 and
// FMA (this build needs them) and nobody named a core: the GEMMs above then ran on those kernels.
TEST(Blas, KernelsAreNotTheGenericFallbackOnThisCpu) {
  const pf::cpu::BlasKernels kernels = pf::cpu::blas_kernels();
  std::cout << "[ INFO     ] OpenBLAS core " << kernels.core
            << (kernels.fallback.empty() ? std::string(" (its own choice)")
                                         : " (PipeForge's choice; OpenBLAS chose " + kernels.fallback + ")")
            << "\n";
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("PF_KEEP_OPENBLAS_KERNELS") != nullptr)
    GTEST_SKIP() << "the kernels were named by the environment";
  __builtin_cpu_init();
  ASSERT_TRUE(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_STRCASENE(kernels.core.c_str(), "Prescott");
  if (!kernels.fallback.empty()) EXPECT_STRCASEEQ(kernels.fallback.c_str(), "Prescott");
}
