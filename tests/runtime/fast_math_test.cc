#include <gtest/gtest.h>

#include <cmath>

#include "runtime/kernels/cpu/fast_math.h"

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

}  // namespace
}  // namespace pf
