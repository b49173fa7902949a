#include "runtime/layers/sequential.h"

#include <gtest/gtest.h>

#include "runtime/layers/activations.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

// GELU rather than ReLU in the middle, so finite differences never straddle a kink.
std::unique_ptr<Layer> make_mlp() {
  std::vector<std::unique_ptr<Layer>> layers;
  layers.push_back(std::make_unique<Linear>("mlp.fc0", 5, 7));
  layers.push_back(std::make_unique<GELU>("mlp.act0"));
  layers.push_back(std::make_unique<LayerNorm>("mlp.ln", 7));
  layers.push_back(std::make_unique<Linear>("mlp.head", 7, 3, false));
  return std::make_unique<Sequential>("mlp", std::move(layers));
}

TEST(Sequential, ParametersInLayerOrder) {
  auto mlp = make_mlp();
  std::vector<std::string> names;
  for (Parameter* p : mlp->parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"mlp.fc0.weight", "mlp.fc0.bias", "mlp.ln.weight",
                                             "mlp.ln.bias", "mlp.head.weight"}));
}

TEST(Sequential, GradientsMatchFiniteDifferences) {
  auto mlp = make_mlp();
  randomize_parameters(*mlp, 2);
  check_layer_gradients(*mlp, uniform_tensor({2, 3, 5}, 5), {});
}

TEST(Sequential, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_mlp, {uniform_tensor({2, 3, 5}, 1), uniform_tensor({4, 5}, 2)}, 3);
}

TEST(Sequential, WeightGradientsAccumulate) {
  check_weight_accumulates(make_mlp, uniform_tensor({2, 3, 5}, 1), uniform_tensor({4, 5}, 2), 3);
}

TEST(Sequential, BadInputThrows) {
  auto mlp = make_mlp();
  SavedContext ctx;
  // The error comes from the sub-layer that rejects the input, and names it.
  expect_invalid_argument([&] { mlp->forward(uniform_tensor({2, 6}, 1), ctx); }, {"mlp.fc0", "[2, 6]"});
}

TEST(Sequential, ContextLifecycle) {
  auto mlp = make_mlp();
  randomize_parameters(*mlp, 1);
  check_context_lifecycle(*mlp, uniform_tensor({3, 5}, 2), 3);
  std::vector<std::unique_ptr<Layer>> acts;
  acts.push_back(std::make_unique<ReLU>("acts.0"));
  acts.push_back(std::make_unique<GELU>("acts.1"));
  Sequential parameter_free("acts", std::move(acts));
  check_context_lifecycle(parameter_free, uniform_tensor({3, 5}, 2), 3);
}

}  // namespace
}  // namespace pf::test
