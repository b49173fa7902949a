#include "runtime/layers/residual.h"

#include <gtest/gtest.h>

#include "runtime/layers/activations.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/sequential.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

std::unique_ptr<Layer> make_residual() {
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Linear>("res.0", 4, 6));
  body.push_back(std::make_unique<GELU>("res.1"));
  body.push_back(std::make_unique<Linear>("res.2", 6, 4));
  return std::make_unique<Residual>("res", std::make_unique<Sequential>("res.body", std::move(body)));
}

TEST(Residual, ForwardAddsTheInput) {
  auto res = make_residual();
  randomize_parameters(*res, 2);
  auto& body = static_cast<Residual&>(*res).body();
  const Tensor x = uniform_tensor({3, 4}, 1);
  SavedContext c1, c2;
  const Tensor y = res->forward(x, c1);
  const Tensor fx = body.forward(x, c2);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.f32()[i], x.f32()[i] + fx.f32()[i]);
}

TEST(Residual, GradientsMatchFiniteDifferences) {
  auto res = make_residual();
  randomize_parameters(*res, 2);
  check_layer_gradients(*res, uniform_tensor({2, 3, 4}, 5), {});
}

TEST(Residual, ParameterFreeBodyGradients) {
  Residual res("res", std::make_unique<GELU>("res.act"));
  check_layer_gradients(res, uniform_tensor({2, 5}, 5, -2.0f, 2.0f), {});
  check_context_lifecycle(res, uniform_tensor({2, 5}, 5), 1);
}

TEST(Residual, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_residual, {uniform_tensor({2, 3, 4}, 1), uniform_tensor({5, 4}, 2)}, 3);
}

TEST(Residual, WeightGradientsAccumulate) {
  check_weight_accumulates(make_residual, uniform_tensor({2, 3, 4}, 1), uniform_tensor({5, 4}, 2), 3);
}

TEST(Residual, BadInputThrows) {
  SavedContext ctx;
  // The body changes the width, so the skip connection cannot be added.
  Residual wrong("blocks.0.res", std::make_unique<Linear>("blocks.0.res.fc", 4, 3));
  expect_invalid_argument([&] { wrong.forward(uniform_tensor({2, 4}, 1), ctx); },
                          {"blocks.0.res", "[2, 3]", "[2, 4]"});
  auto res = make_residual();
  SavedContext ctx2;
  expect_invalid_argument([&] { res->forward(int_tensor({1, 4}, {1, 2, 3, 4}), ctx2); }, {"res", "i32"});
  res->forward(uniform_tensor({2, 4}, 1), ctx2);
  expect_invalid_argument([&] { res->backward_input(ctx2, uniform_tensor({3, 4}, 1)); }, {"res", "[3, 4]"});
  expect_invalid_argument([] { Residual("empty", nullptr); }, {"empty"});
}

TEST(Residual, ContextLifecycle) {
  auto res = make_residual();
  randomize_parameters(*res, 1);
  check_context_lifecycle(*res, uniform_tensor({3, 4}, 2), 3);
}

}  // namespace
}  // namespace pf::test
