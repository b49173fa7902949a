#include "runtime/layers/linear.h"

#include <cfloat>
#include <cmath>

#include <gtest/gtest.h>

#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

std::unique_ptr<Layer> make_linear() { return std::make_unique<Linear>("fc", 5, 4); }

TEST(Linear, GradientsMatchFiniteDifferences) {
  for (bool bias : {true, false}) {
    Linear layer("fc", 5, 4, bias);
    randomize_parameters(layer, 3);
    check_layer_gradients(layer, uniform_tensor({2, 3, 5}, 11), {});
  }
}

TEST(Linear, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_linear, {uniform_tensor({6, 5}, 1), uniform_tensor({2, 3, 5}, 2)}, 7);
}

TEST(Linear, WeightGradientsAccumulate) {
  check_weight_accumulates(make_linear, uniform_tensor({6, 5}, 1), uniform_tensor({3, 5}, 2), 7);
}

// forward_residual = residual + forward, to two f32 roundings (acc + (r + b) against (acc + b) + r):
// |d| <= 4 eps (|r| + |forward| + 1), the 1 bounding |b|.
TEST(Linear, ForwardResidualAddsTheResidual) {
  for (bool bias : {true, false}) {
    Linear layer("fc", 5, 4, bias);
    randomize_parameters(layer, 3);
    const Tensor x = uniform_tensor({2, 3, 5}, 4), r = uniform_tensor({2, 3, 4}, 5);
    SavedContext c1, c2;
    const Tensor folded = layer.forward_residual(x, r, c1), plain = layer.forward(x, c2);
    for (int64_t i = 0; i < plain.numel(); ++i) {
      const float ri = r.f32()[i], pi = plain.f32()[i];
      EXPECT_NEAR(folded.f32()[i], ri + pi, 4 * FLT_EPSILON * (std::fabs(ri) + std::fabs(pi) + 1.0f)) << i;
    }
    EXPECT_EQ(c1.bytes(), c2.bytes());
    expect_invalid_argument([&] { layer.forward_residual(x, uniform_tensor({6, 4}, 1), c1); }, {"fc", "[6, 4]"});
  }
}

// A bias gradient handed to B replaces W's own column sums: from zero gradients, the row-order sums
// of the output gradient give W's result bitwise; a different one shows up in the bias gradient.
TEST(Linear, BackwardInputTakesTheBiasGradient) {
  Linear a("fc", 5, 4), b("fc", 5, 4);
  randomize_parameters(a, 3);
  randomize_parameters(b, 3);
  const Tensor x = uniform_tensor({6, 5}, 4), dy = uniform_tensor({6, 4}, 5);
  Tensor sums = Tensor::zeros({4});
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t o = 0; o < 4; ++o) sums.f32()[o] += dy.f32()[r * 4 + o];
  SavedContext c1, c2;
  a.forward(x, c1);
  b.forward(x, c2);
  EXPECT_TRUE(bitwise_equal(a.backward_input_bias_grad(c1, dy, sums), b.backward_input(c2, dy)));
  EXPECT_EQ(c1.bytes(), c2.bytes() + 4 * sizeof(float));
  a.backward_weight(c1);
  b.backward_weight(c2);
  EXPECT_TRUE(c1.empty());
  for (size_t p = 0; p < 2; ++p) EXPECT_TRUE(bitwise_equal(a.parameters()[p]->grad, b.parameters()[p]->grad)) << p;
  SavedContext c3;
  a.forward(x, c3);
  a.backward_input_bias_grad(c3, dy, Tensor::from_vector({4}, {1, 2, 3, 4}));
  a.backward_weight(c3);
  for (int64_t o = 0; o < 4; ++o)
    EXPECT_EQ(a.parameters()[1]->grad.f32()[o], b.parameters()[1]->grad.f32()[o] + static_cast<float>(o + 1));
  expect_invalid_argument([&] { a.backward_input_bias_grad(c3, dy, Tensor::zeros({3})); }, {"fc", "bias gradient"});
}

TEST(Linear, BadInputThrows) {
  Linear layer("blocks.0.fc", 5, 4);
  SavedContext ctx;
  expect_invalid_argument([&] { layer.forward(uniform_tensor({2, 4}, 1), ctx); },
                          {"blocks.0.fc", "[2, 4]"});
  expect_invalid_argument([&] { layer.forward(int_tensor({1, 5}, {0, 1, 2, 3, 4}), ctx); },
                          {"blocks.0.fc", "i32"});
  expect_invalid_argument([] { Linear("bad", 0, 4); }, {"bad"});
}

TEST(Linear, ContextLifecycle) {
  Linear layer("fc", 5, 4);
  randomize_parameters(layer, 1);
  check_context_lifecycle(layer, uniform_tensor({3, 5}, 2), 3);
}

}  // namespace
}  // namespace pf::test
