#include "runtime/layers/activations.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

TEST(ReLU, ForwardValues) {
  ReLU relu("act");
  SavedContext ctx;
  Tensor y = relu.forward(Tensor::from_vector({4}, {-2.0f, -0.0f, 0.5f, 3.0f}), ctx);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0.0f, 0.0f, 0.5f, 3.0f}));
}

// NaN passes through forward and backward, as in PyTorch (issue 43 item 1: ReLU mapped NaN to 0,
// so a NaN upstream left the loss finite and the divergence guard silent). -0 still gives +0.
TEST(ReLU, NanPassesThroughAsInPyTorch) {
  ReLU relu("act");
  SavedContext ctx;
  const float nan = std::nanf("");
  const Tensor y = relu.forward(Tensor::from_vector({4}, {nan, -0.0f, -1.0f, 2.0f}), ctx);
  const std::vector<float> out = y.to_vector();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_FALSE(std::signbit(out[1]));
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 2.0f);
  const std::vector<float> dx = relu.backward(ctx, Tensor::from_vector({4}, {1.0f, 1.0f, 1.0f, 1.0f})).to_vector();
  EXPECT_EQ(dx, (std::vector<float>{1.0f, 0.0f, 0.0f, 1.0f}));  // PyTorch: grad where not (x <= 0)
}

TEST(ReLU, GradientsMatchFiniteDifferences) {
  // Inputs keep |x| >= 0.1 > eps, so no central difference straddles the kink.
  ReLU relu("act");
  check_layer_gradients(relu, away_from_zero_tensor({2, 3, 4}, 5, 0.1f), {});
}

TEST(GELU, ForwardMatchesTanhApproximation) {
  GELU gelu("act");
  SavedContext ctx;
  const std::vector<float> x = {-3.0f, -1.0f, 0.0f, 0.5f, 2.0f};
  const std::vector<float> y = gelu.forward(Tensor::from_vector({5}, x), ctx).to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double expected = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(y[i], expected, 1e-6) << "x = " << v;
  }
}

TEST(GELU, GradientsMatchFiniteDifferences) {
  GELU gelu("act");
  check_layer_gradients(gelu, uniform_tensor({2, 3, 4}, 5, -3.0f, 3.0f), {});
}

// backward_input_column_sums: the input gradient of backward_input bitwise, and its sums over rows.
TEST(GELU, BackwardColumnSumsAreTheBiasGradient) {
  GELU act("act");
  const Tensor x = uniform_tensor({2, 3, 5}, 1, -3.0f, 3.0f), dy = uniform_tensor({2, 3, 5}, 2);
  SavedContext c1, c2;
  act.forward(x, c1);
  act.forward(x, c2);
  Tensor sums;
  const Tensor dx = act.backward_input_column_sums(c1, dy, &sums);
  EXPECT_TRUE(bitwise_equal(dx, act.backward_input(c2, dy)));
  EXPECT_TRUE(c1.empty());
  ASSERT_EQ(sums.shape(), (Shape{5}));
  for (int64_t c = 0; c < 5; ++c) {
    double want = 0.0;
    for (int64_t r = 0; r < 6; ++r) want += dx.f32()[r * 5 + c];
    EXPECT_NEAR(sums.f32()[c], want, 1e-6 * (1.0 + std::fabs(want))) << c;
  }
}

TEST(Activations, FusedBackwardEqualsSplit) {
  const std::vector<Tensor> inputs = {uniform_tensor({2, 7}, 1, -3, 3), uniform_tensor({5}, 2, -3, 3)};
  check_fused_equals_split([] { return std::make_unique<ReLU>("relu"); }, inputs, 3);
  check_fused_equals_split([] { return std::make_unique<GELU>("gelu"); }, inputs, 3);
}

TEST(Activations, BadInputThrows) {
  const Tensor ids = int_tensor({2}, {1, 2});
  SavedContext ctx;
  ReLU relu("mlp.relu");
  GELU gelu("mlp.gelu");
  expect_invalid_argument([&] { relu.forward(ids, ctx); }, {"mlp.relu", "i32"});
  expect_invalid_argument([&] { gelu.forward(ids, ctx); }, {"mlp.gelu", "i32"});
  gelu.forward(uniform_tensor({2, 3}, 1), ctx);
  expect_invalid_argument([&] { gelu.backward_input(ctx, uniform_tensor({3, 2}, 1)); },
                          {"mlp.gelu", "[3, 2]"});
}

TEST(Activations, ContextLifecycle) {
  ReLU relu("relu");
  GELU gelu("gelu");
  check_context_lifecycle(relu, uniform_tensor({3, 4}, 1), 2);
  check_context_lifecycle(gelu, uniform_tensor({3, 4}, 1), 2);
}

}  // namespace
}  // namespace pf::test
