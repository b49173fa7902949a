#include "runtime/layers/layer_norm.h"

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

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  LayerNorm ln("ln", 6);
  randomize_parameters(ln, 2);
  check_layer_gradients(ln, uniform_tensor({2, 3, 6}, 9, -2.0f, 2.0f), {});
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
