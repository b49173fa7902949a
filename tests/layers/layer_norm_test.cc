#include "runtime/layers/layer_norm.h"

#include <cfloat>
#include <cmath>

#include <gtest/gtest.h>

#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

std::unique_ptr<Layer> make_ln() { return std::make_unique<LayerNorm>("ln", 6); }

TEST(LayerNorm, ParametersAndForward) {
  LayerNorm ln("blocks.0.ln1", 4);
  auto params = ln.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "blocks.0.ln1.weight");
  EXPECT_EQ(params[1]->name, "blocks.0.ln1.bias");
  EXPECT_EQ(params[0]->init.kind, InitSpec::Kind::kOnes);
  EXPECT_EQ(params[1]->init.kind, InitSpec::Kind::kZeros);
  params[0]->value.fill(1.0f);
  SavedContext ctx;
  const std::vector<float> y = ln.forward(Tensor::from_vector({1, 4}, {1, 2, 3, 4}), ctx).to_vector();
  const double rstd = 1.0 / std::sqrt(1.25 + 1e-5);
  const double expected[4] = {-1.5 * rstd, -0.5 * rstd, 0.5 * rstd, 1.5 * rstd};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i], expected[i], 1e-6);
}

// dim 6 runs only the kernels' scalar tail, 37 two 16-wide vector steps and a tail.
TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  for (int64_t dim : {6, 37}) {
    LayerNorm ln("ln", dim);
    randomize_parameters(ln, 2);
    check_layer_gradients(ln, uniform_tensor({2, 3, dim}, 9, -2.0f, 2.0f), {});
  }
}

// The folded residual: forward_residual(x, a) is forward(x + a) bitwise, with x + a in *sum and
// the same context.
TEST(LayerNorm, ForwardResidualEqualsForwardOfTheSum) {
  LayerNorm ln("ln", 37);
  randomize_parameters(ln, 3);
  const Tensor x = uniform_tensor({2, 3, 37}, 4), a = uniform_tensor({2, 3, 37}, 5);
  Tensor want_sum = x.clone();
  for (int64_t i = 0; i < x.numel(); ++i) want_sum.f32()[i] += a.f32()[i];
  SavedContext c1, c2;
  Tensor sum;
  EXPECT_TRUE(bitwise_equal(ln.forward_residual(x, a, c1, &sum), ln.forward(want_sum, c2)));
  EXPECT_TRUE(bitwise_equal(sum, want_sum));
  EXPECT_EQ(c1.bytes(), c2.bytes());
  EXPECT_TRUE(bitwise_equal(c1.get("xhat"), c2.get("xhat")));
  expect_invalid_argument([&] { ln.forward_residual(x, uniform_tensor({2, 37}, 1), c1, &sum); }, {"ln", "[2, 37]"});
}

// backward_input_residual = backward_input + skip_grad, to the rounding of that add (it may be
// fused into a multiply-add): |d| <= 2 eps (|skip| + 2 |plain|).
TEST(LayerNorm, BackwardInputResidualAddsTheSkipGradient) {
  LayerNorm ln("ln", 37);
  randomize_parameters(ln, 3);
  const Tensor x = uniform_tensor({4, 37}, 6), dy = uniform_tensor({4, 37}, 7), skip = uniform_tensor({4, 37}, 8);
  SavedContext c1, c2;
  ln.forward(x, c1);
  ln.forward(x, c2);
  const Tensor folded = ln.backward_input_residual(c1, dy, skip), plain = ln.backward_input(c2, dy);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float s = skip.f32()[i], p = plain.f32()[i];
    EXPECT_NEAR(folded.f32()[i], s + p, 2 * FLT_EPSILON * (std::fabs(s) + 2 * std::fabs(p))) << i;
  }
  EXPECT_EQ(c1.bytes(), c2.bytes());
}

TEST(LayerNorm, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_ln, {uniform_tensor({4, 6}, 1), uniform_tensor({2, 2, 6}, 2)}, 5);
}

TEST(LayerNorm, WeightGradientsAccumulate) {
  check_weight_accumulates(make_ln, uniform_tensor({4, 6}, 1), uniform_tensor({3, 6}, 2), 5);
}

TEST(LayerNorm, BadInputThrows) {
  LayerNorm ln("blocks.1.ln2", 6);
  SavedContext ctx;
  expect_invalid_argument([&] { ln.forward(uniform_tensor({2, 5}, 1), ctx); }, {"blocks.1.ln2", "[2, 5]"});
  ln.forward(uniform_tensor({2, 6}, 1), ctx);
  expect_invalid_argument([&] { ln.backward_input(ctx, uniform_tensor({3, 6}, 1)); },
                          {"blocks.1.ln2", "[3, 6]"});
  expect_invalid_argument([] { LayerNorm("ln_bad", 4, 0.0f); }, {"ln_bad", "eps"});
  expect_invalid_argument([] { LayerNorm("ln_bad", 0); }, {"ln_bad", "dim"});
}

TEST(LayerNorm, ContextLifecycle) {
  LayerNorm ln("ln", 6);
  randomize_parameters(ln, 1);
  check_context_lifecycle(ln, uniform_tensor({3, 6}, 2), 3);
}

TEST(LayerNorm, BackwardInputKeepsOnlyWhatWeightGradientNeeds) {
  LayerNorm ln("ln", 64);
  SavedContext ctx;
  const Tensor x = uniform_tensor({8, 64}, 1);
  ln.forward(x, ctx);
  const Tensor dy = uniform_tensor({8, 64}, 2);
  ln.backward_input(ctx, dy);
  // xhat and the output gradient: two [8, 64] f32 tensors (1/std was dropped).
  EXPECT_EQ(ctx.bytes(), 2 * dy.storage_bytes());
}

}  // namespace
}  // namespace pf::test
