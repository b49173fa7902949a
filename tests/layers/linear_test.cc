#include "runtime/layers/linear.h"

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
