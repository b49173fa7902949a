#include "runtime/layers/embedding.h"

#include <gtest/gtest.h>

#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

std::unique_ptr<Layer> make_embedding() { return std::make_unique<Embedding>("embed", 7, 4, 5); }

// Token 3 appears three times, so the scatter-add sums repeated rows.
Tensor ids_a() { return int_tensor({2, 3}, {3, 0, 3, 6, 3, 1}); }
Tensor ids_b() { return int_tensor({1, 4}, {2, 2, 5, 0}); }

TEST(Embedding, ParametersAndForward) {
  Embedding embed("embed", 7, 4, 5, 0.1f);
  auto params = embed.parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "embed.token_weight");
  EXPECT_EQ(params[0]->value.shape(), (Shape{7, 5}));
  EXPECT_EQ(params[1]->name, "embed.position_weight");
  EXPECT_EQ(params[1]->value.shape(), (Shape{4, 5}));
  EXPECT_EQ(params[0]->init.kind, InitSpec::Kind::kNormal);
  EXPECT_FLOAT_EQ(params[1]->init.stddev, 0.1f);
  randomize_parameters(embed, 3);
  SavedContext ctx;
  const Tensor ids = ids_a();
  const Tensor y = embed.forward(ids, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  const float* tok = params[0]->value.f32();
  const float* pos = params[1]->value.f32();
  for (int r = 0; r < 6; ++r)
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(y.f32()[r * 5 + i], tok[ids.i32()[r] * 5 + i] + pos[(r % 3) * 5 + i]);
}

TEST(Embedding, GradientsMatchFiniteDifferences) {
  Embedding embed("embed", 7, 4, 5);
  randomize_parameters(embed, 3);
  // The output is linear in the parameters: the differences are exact up to f32 rounding.
  check_layer_gradients(embed, ids_a(), {});
}

TEST(Embedding, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_embedding, {ids_a(), ids_b()}, 4);
}

TEST(Embedding, WeightGradientsAccumulate) {
  check_weight_accumulates(make_embedding, ids_a(), ids_b(), 4);
}

TEST(Embedding, BadInputThrows) {
  Embedding embed("wte", 7, 4, 5);
  SavedContext ctx;
  expect_invalid_argument([&] { embed.forward(int_tensor({1, 3}, {1, 7, 2}), ctx); },
                          {"wte", "token id 7", "[0, 1]"});
  expect_invalid_argument([&] { embed.forward(int_tensor({2, 2}, {1, 2, 3, -1}), ctx); },
                          {"wte", "token id -1", "[1, 1]"});
  expect_invalid_argument([&] { embed.forward(int_tensor({1, 5}, {1, 2, 3, 4, 5}), ctx); },
                          {"wte", "[1, 5]", "T <= 4"});
  expect_invalid_argument([&] { embed.forward(int_tensor({4}, {1, 2, 3, 4}), ctx); }, {"wte", "[4]"});
  expect_invalid_argument([&] { embed.forward(uniform_tensor({1, 2}, 1), ctx); }, {"wte", "f32"});
  embed.forward(ids_a(), ctx);
  expect_invalid_argument([&] { embed.backward_input(ctx, uniform_tensor({2, 3, 4}, 1)); },
                          {"wte", "[2, 3, 4]"});
}

TEST(Embedding, ContextLifecycle) {
  Embedding embed("embed", 7, 4, 5);
  check_context_lifecycle(embed, ids_a(), 2);
}

}  // namespace
}  // namespace pf::test
