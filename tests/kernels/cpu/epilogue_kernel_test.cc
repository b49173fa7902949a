// The fused GELU epilogues against the separate passes they replace, and the row passes.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/reference/gelu_tanh_reference.h"
#include "runtime/kernels/cpu/rows.h"

namespace pf::cpu {
namespace {

std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The GELU and its derivative against double-precision tanh (tests/runtime/fast_math_test bounds
// the scalar functions over a dense sweep; these are the loops, tails included).
TEST(GeluKernel, MatchesTheTanhFormula) {
  const auto x = random_values(1000, 1, -6.0f, 6.0f);
  std::vector<float> y(x.size()), dx(x.size()), ones(x.size(), 1.0f);
  gelu_forward(static_cast<int64_t>(x.size()), x.data(), y.data());
  gelu_backward(static_cast<int64_t>(x.size()), x.data(), ones.data(), dx.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v), t = std::tanh(u);
    const double want_y = 0.5 * v * (1.0 + t);
    const double want_dx = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * v * v);
    EXPECT_NEAR(y[i], want_y, 2e-6 * (1.0 + std::fabs(want_y))) << v;
    EXPECT_NEAR(dx[i], want_dx, 2e-6 * (1.0 + std::fabs(want_dx))) << v;
  }
}

// The kernels against the tanh form they replaced, over [-12, 12] and 1003 elements (tails included).
TEST(GeluKernel, AgreesWithTheTanhFormItReplaced) {
  const auto x = random_values(1003, 9, -12.0f, 12.0f), dy = random_values(1003, 10, -2.0f, 2.0f);
  std::vector<float> y(x.size()), want_y(x.size()), dx(x.size()), want_dx(x.size());
  gelu_forward(static_cast<int64_t>(x.size()), x.data(), y.data());
  gelu_backward(static_cast<int64_t>(x.size()), x.data(), dy.data(), dx.data());
  reference::gelu_tanh_forward(static_cast<int64_t>(x.size()), x.data(), want_y.data());
  reference::gelu_tanh_backward(static_cast<int64_t>(x.size()), x.data(), dy.data(), want_dx.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(y[i], want_y[i], 1e-6) << x[i];
    EXPECT_NEAR(dx[i], want_dx[i], 2e-6 * std::fabs(dy[i])) << x[i];
  }
}

// GELU backward with the bias-gradient reduction: dx bitwise the plain backward's, the column sums
// bitwise the row-order sums of dx.
TEST(GeluKernel, BackwardColumnSumsEqualSeparatePasses) {
  for (int64_t cols : {1, 7, 64, 1024}) {
    const int64_t rows = 9;
    const auto x = random_values(rows * cols, 2), dy = random_values(rows * cols, 3, -1.0f, 1.0f);
    std::vector<float> want_dx(x.size()), dx(x.size()), sums(cols, 123.0f), want_sums(cols, 0.0f);
    gelu_backward(rows * cols, x.data(), dy.data(), want_dx.data());
    accumulate_column_sums(rows, cols, want_dx.data(), want_sums.data());
    gelu_backward_column_sums(rows, cols, x.data(), dy.data(), dx.data(), sums.data());
    EXPECT_TRUE(same_bits(dx, want_dx)) << cols;
    EXPECT_TRUE(same_bits(sums, want_sums)) << cols;  // overwritten, not accumulated
  }
}

TEST(GeluKernel, BiasGeluForwardEqualsSeparatePasses) {
  const int64_t rows = 5, cols = 37;
  const auto acc = random_values(rows * cols, 4), bias = random_values(cols, 5);
  std::vector<float> want_pre(acc.size()), want_post(acc.size());
  add_broadcast_rows(rows, cols, acc.data(), bias.data(), want_pre.data());
  gelu_forward(rows * cols, want_pre.data(), want_post.data());
  std::vector<float> pre = acc, post(acc.size());
  bias_gelu_forward(rows, cols, bias.data(), pre.data(), post.data());
  EXPECT_TRUE(same_bits(pre, want_pre));
  EXPECT_TRUE(same_bits(post, want_post));
}

TEST(RowKernels, BroadcastAddAndColumnSums) {
  const int64_t rows = 3, cols = 4;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, row = {0.5f, -1, 2, 0};
  std::vector<float> out(rows * cols), sums = {1, 1, 1, 1};
  broadcast_rows(rows, cols, row.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1, 2, 0, 0.5f, -1, 2, 0, 0.5f, -1, 2, 0}));
  add_broadcast_rows(rows, cols, x.data(), row.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{1.5f, 1, 5, 4, 5.5f, 5, 9, 8, 9.5f, 9, 13, 12}));
  add(rows * cols, x.data(), x.data(), out.data());
  EXPECT_EQ(out, (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24}));
  accumulate_column_sums(rows, cols, x.data(), sums.data());
  EXPECT_EQ(sums, (std::vector<float>{16, 19, 22, 25}));
}

}  // namespace
}  // namespace pf::cpu
