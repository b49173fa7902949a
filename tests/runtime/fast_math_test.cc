#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/fast_math_lanes.h"

PF_VEC8_NO_PSABI_WARNING

namespace pf {
namespace {

TEST(FastMath, ExpIsWithinTwoUlpOverTheFloatRange) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.00731f) {
    const double exact = std::exp(static_cast<double>(x));
    const double rel = std::fabs(cpu::fast_exp(x) - exact) / exact;
    worst = rel > worst ? rel : worst;
  }
  EXPECT_LT(worst, 2.5e-7);  // 2 ulp of float is 2.4e-7 relative
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isfinite(cpu::fast_exp(1000.0f)));
  EXPECT_GT(cpu::fast_exp(-1000.0f), 0.0f);
  EXPECT_LT(cpu::fast_exp(-1000.0f), 1e-37f);
}

TEST(FastMath, TanhIsWithinTwoTenMillionthsAndOdd) {
  double worst = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.000913f) {
    const double err = std::fabs(cpu::fast_tanh(x) - std::tanh(static_cast<double>(x)));
    worst = err > worst ? err : worst;
    ASSERT_EQ(cpu::fast_tanh(-x), -cpu::fast_tanh(x));
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(cpu::fast_tanh(0.0f), 0.0f);
  EXPECT_EQ(cpu::fast_tanh(50.0f), 1.0f);
}

// GPT-2's tanh GELU and its derivative, exactly (double precision).
double exact_gelu(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }
double exact_gelu_grad(double v) {
  const double t = std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v));
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3 * 0.044715 * v * v);
}

TEST(FastMath, GeluAndItsDerivativeAreWithinBoundsOfTheTanhFormula) {
  double worst_y = 0, worst_dx = 0;
  for (float x = -12.0f; x < 12.0f; x += 0.000377f) {
    worst_y = std::fmax(worst_y, std::fabs(cpu::gelu(x) - exact_gelu(x)));
    worst_dx = std::fmax(worst_dx, std::fabs(cpu::gelu_grad(x, 1.0f) - exact_gelu_grad(x)));
  }
  EXPECT_LT(worst_y, 6e-7);
  EXPECT_LT(worst_dx, 3e-7);
  EXPECT_EQ(cpu::gelu(0.0f), 0.0f);
  EXPECT_EQ(cpu::gelu(30.0f), 30.0f);
  EXPECT_EQ(cpu::gelu_grad(30.0f, 2.0f), 2.0f);
  // Far out: exactly 0 on the negative side, exactly linear on the positive one, whatever the
  // magnitude (the derivative's polynomial in v must not overflow); NaN propagates.
  for (float x : {-9.7f, -20.0f, -1e4f, -1e30f, -INFINITY}) {
    EXPECT_EQ(cpu::gelu(x), 0.0f) << x;
    EXPECT_EQ(cpu::gelu_grad(x, 1.0f), 0.0f) << x;
  }
  for (float x : {10.0f, 20.0f, 1e4f, 1e30f}) {
    EXPECT_EQ(cpu::gelu(x), x) << x;
    EXPECT_EQ(cpu::gelu_grad(x, 3.0f), 3.0f) << x;
  }
  EXPECT_TRUE(std::isnan(cpu::gelu(NAN)));
  EXPECT_TRUE(std::isnan(cpu::gelu_grad(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(cpu::gelu_grad(1.0f, NAN)));
  EXPECT_TRUE(std::isnan(cpu::gelu_grad(-20.0f, NAN)));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Every lane of exp_lanes, tanh_lanes, gelu_lanes and gelu_grad_lanes gives the scalar function's bits: floats
// from -1e6 to 1e6 stepping through every 97th bit pattern (about 25 million values), plus
// infinities and NaN.
TEST(FastMath, LanesGiveTheScalarFunctionsBits) {
  std::vector<float> xs;
  for (uint32_t bits = 0; bits < 0x49742400u; bits += 97) {  // 0 .. 1e6
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    xs.push_back(x);
    xs.push_back(-x);
  }
  xs.push_back(INFINITY);
  xs.push_back(-INFINITY);
  xs.push_back(NAN);
  while (xs.size() % 8 != 0) xs.push_back(1.0f);
  int64_t mismatches = 0;
  for (size_t i = 0; i < xs.size(); i += 8) {
    const cpu::v8f x = cpu::load8(&xs[i]), dy = x * 0.5f + 1.0f;
    const cpu::v8f e = cpu::exp_lanes(x), y = cpu::gelu_lanes(x), dx = cpu::gelu_grad_lanes(x, dy);
    const cpu::v8f t = cpu::tanh_lanes(x);
    for (int l = 0; l < 8; ++l) {
      const bool ok = same_bits(e[l], cpu::fast_exp(x[l])) && same_bits(t[l], cpu::fast_tanh(x[l])) &&
                      same_bits(y[l], cpu::gelu(x[l])) &&
                      same_bits(dx[l], cpu::gelu_grad(x[l], dy[l]));
      if (!ok && ++mismatches <= 5) ADD_FAILURE() << "lanes differ from the scalar function at x = " << x[l];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace pf
