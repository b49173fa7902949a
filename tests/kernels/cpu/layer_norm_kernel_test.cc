// The one-pass LayerNorm kernels against the two-pass reference (within tolerance: the sums run in
// another order) and against double precision; the folded residual forms bitwise against the
// unfolded ones.
#include "runtime/kernels/cpu/layer_norm.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/cpu/reference/layer_norm_reference.h"

namespace pf::cpu {
namespace {

constexpr float kEps = 1e-5f;

std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Dims below one 16-wide step (tail only), exact steps, and steps plus a tail.
const int64_t kDims[] = {1, 6, 16, 37, 64, 256, 515};

struct Forward {
  std::vector<float> y, xhat, rstd;
};

Forward run_forward(int64_t rows, int64_t dim, const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& b, bool reference) {
  Forward f{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(rows)};
  if (reference)
    reference::layer_norm_forward(rows, dim, x.data(), w.data(), b.data(), kEps, f.y.data(), f.xhat.data(),
                                  f.rstd.data());
  else
    layer_norm_forward(rows, dim, x.data(), nullptr, nullptr, w.data(), b.data(), kEps, f.y.data(), f.xhat.data(),
                       f.rstd.data());
  return f;
}

// Outputs are O(1): |kernel - reference| <= 1e-5 + 1e-5 |reference| (both sums are f32 over at
// most 515 values; measured differences stay below 1e-6).
TEST(LayerNormKernel, ForwardMatchesTwoPassReference) {
  const int64_t rows = 5;
  for (int64_t dim : kDims) {
    const auto x = random_values(rows * dim, 1, -2.0f, 3.0f);
    const auto w = random_values(dim, 2, 0.5f, 1.5f), b = random_values(dim, 3);
    const Forward got = run_forward(rows, dim, x, w, b, false), want = run_forward(rows, dim, x, w, b, true);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(got.y[i], want.y[i], 1e-5 + 1e-5 * std::fabs(want.y[i])) << "dim " << dim << " element " << i;
      ASSERT_NEAR(got.xhat[i], want.xhat[i], 1e-5 + 1e-5 * std::fabs(want.xhat[i])) << "dim " << dim;
    }
    for (int64_t r = 0; r < rows; ++r) ASSERT_NEAR(got.rstd[r], want.rstd[r], 1e-5 * want.rstd[r]) << "dim " << dim;
  }
}

// A large offset against a small spread (mean 1e4, values within +-1): the moments of one pass must
// not cancel. In f32, sum(x^2) - n mean^2 would lose every digit of m2 here; Welford keeps it
// within 1e-3 relative of the double-precision value (the inputs themselves carry 1e-3 ulp).
TEST(LayerNormKernel, MomentsStayAccurateForALargeMean) {
  for (int64_t dim : kDims) {
    if (dim < 2) continue;
    std::vector<float> x = random_values(dim, 4);
    for (float& v : x) v += 1.0e4f;
    double mean = 0.0, m2 = 0.0;
    for (float v : x) mean += v;
    mean /= static_cast<double>(dim);
    for (float v : x) m2 += (v - mean) * (v - mean);
    float got_mean, got_m2;
    row_moments(dim, x.data(), nullptr, nullptr, &got_mean, &got_m2);
    EXPECT_NEAR(got_mean, mean, 1e-3) << "dim " << dim;
    EXPECT_NEAR(got_m2, m2, 1e-3 * m2) << "dim " << dim;
  }
}

TEST(LayerNormKernel, MomentsOfAConstantRowAreExact) {
  const std::vector<float> x(37, 2.5f);
  float mean, m2;
  row_moments(37, x.data(), nullptr, nullptr, &mean, &m2);
  EXPECT_EQ(mean, 2.5f);
  EXPECT_EQ(m2, 0.0f);
}

// The folded residual: sum = x + skip bitwise, and the outputs are those of the plain forward on sum.
TEST(LayerNormKernel, FoldedResidualEqualsForwardOfTheSum) {
  const int64_t rows = 3;
  for (int64_t dim : kDims) {
    const auto x = random_values(rows * dim, 5), skip = random_values(rows * dim, 6);
    const auto w = random_values(dim, 7, 0.5f, 1.5f), b = random_values(dim, 8);
    std::vector<float> want_sum(x.size());
    for (size_t i = 0; i < x.size(); ++i) want_sum[i] = x[i] + skip[i];
    const Forward want = run_forward(rows, dim, want_sum, w, b, false);
    Forward got{std::vector<float>(x.size()), std::vector<float>(x.size()), std::vector<float>(rows)};
    std::vector<float> sum(x.size());
    layer_norm_forward(rows, dim, x.data(), skip.data(), sum.data(), w.data(), b.data(), kEps, got.y.data(),
                       got.xhat.data(), got.rstd.data());
    EXPECT_TRUE(same_bits(sum, want_sum)) << "dim " << dim;
    EXPECT_TRUE(same_bits(got.y, want.y)) << "dim " << dim;
    EXPECT_TRUE(same_bits(got.xhat, want.xhat)) << "dim " << dim;
    EXPECT_TRUE(same_bits(got.rstd, want.rstd)) << "dim " << dim;
  }
}

// Input gradients are O(1) here: |kernel - reference| <= 1e-5 + 1e-5 |reference|.
TEST(LayerNormKernel, BackwardMatchesReference) {
  const int64_t rows = 4;
  for (int64_t dim : kDims) {
    const auto x = random_values(rows * dim, 9, -2.0f, 2.0f), dy = random_values(rows * dim, 10);
    const auto w = random_values(dim, 11, 0.5f, 1.5f), b = random_values(dim, 12);
    const Forward f = run_forward(rows, dim, x, w, b, false);
    std::vector<float> got(x.size()), want(x.size());
    layer_norm_backward_input(rows, dim, f.xhat.data(), f.rstd.data(), w.data(), dy.data(), nullptr, got.data());
    reference::layer_norm_backward_input(rows, dim, f.xhat.data(), f.rstd.data(), w.data(), dy.data(), want.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::fabs(want[i])) << "dim " << dim << " element " << i;
  }
}

// The folded residual gradient: skip_grad + the plain gradient, to within the rounding of that one
// add (the kernel may fuse it into a multiply-add, one rounding fewer).
TEST(LayerNormKernel, FoldedResidualGradientIsAdded) {
  const int64_t rows = 3;
  for (int64_t dim : kDims) {
    const auto x = random_values(rows * dim, 13), dy = random_values(rows * dim, 14);
    const auto skip_grad = random_values(rows * dim, 15), w = random_values(dim, 16, 0.5f, 1.5f);
    const Forward f = run_forward(rows, dim, x, w, std::vector<float>(dim, 0.0f), false);
    std::vector<float> plain(x.size()), folded(x.size());
    layer_norm_backward_input(rows, dim, f.xhat.data(), f.rstd.data(), w.data(), dy.data(), nullptr, plain.data());
    layer_norm_backward_input(rows, dim, f.xhat.data(), f.rstd.data(), w.data(), dy.data(), skip_grad.data(),
                              folded.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = skip_grad[i] + plain[i];
      ASSERT_NEAR(folded[i], want, 2 * FLT_EPSILON * (std::fabs(skip_grad[i]) + 2 * std::fabs(plain[i])))
          << "dim " << dim << " element " << i;
    }
  }
}

// The row sums against double precision.
TEST(LayerNormKernel, GradientSumsMatchDoublePrecision) {
  for (int64_t dim : kDims) {
    const auto dy = random_values(dim, 17), w = random_values(dim, 18, 0.5f, 1.5f), xh = random_values(dim, 19);
    double want_d = 0.0, want_dx = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      want_d += static_cast<double>(dy[i]) * w[i];
      want_dx += static_cast<double>(dy[i]) * w[i] * xh[i];
    }
    float d, dx;
    row_grad_sums(dim, dy.data(), w.data(), xh.data(), &d, &dx);
    EXPECT_NEAR(d, want_d, 1e-5 * dim) << "dim " << dim;
    EXPECT_NEAR(dx, want_dx, 1e-5 * dim) << "dim " << dim;
  }
}

// Gamma and beta gradients accumulate row by row onto what is there.
TEST(LayerNormKernel, WeightGradientsAccumulateInRowOrder) {
  const int64_t rows = 6, dim = 37;
  const auto xh = random_values(rows * dim, 20), dy = random_values(rows * dim, 21);
  std::vector<float> dw = random_values(dim, 22), db = random_values(dim, 23);
  std::vector<float> want_dw = dw, want_db = db;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dim; ++i) {
      want_dw[i] += dy[r * dim + i] * xh[r * dim + i];
      want_db[i] += dy[r * dim + i];
    }
  layer_norm_backward_weight(rows, dim, xh.data(), dy.data(), dw.data(), db.data());
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_NEAR(dw[i], want_dw[i], 1e-6 * (1 + std::fabs(want_dw[i])));
    EXPECT_EQ(db[i], want_db[i]);
  }
}

}  // namespace
}  // namespace pf::cpu
