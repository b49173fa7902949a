#include "runtime/layers/transformer_block.h"

#include <gtest/gtest.h>

#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

constexpr int64_t kDim = 8, kHeads = 2, kHidden = 12;

std::unique_ptr<Layer> make_block() {
  return std::make_unique<TransformerBlock>("blocks.0", kDim, kHeads, kHidden);
}

TEST(TransformerBlock, ParameterNames) {
  auto block = make_block();
  std::vector<std::string> names;
  for (Parameter* p : block->parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "blocks.0.ln1.weight", "blocks.0.ln1.bias", "blocks.0.attn.qkv.weight",
                       "blocks.0.attn.qkv.bias", "blocks.0.attn.proj.weight", "blocks.0.attn.proj.bias",
                       "blocks.0.ln2.weight", "blocks.0.ln2.bias", "blocks.0.mlp.fc.weight",
                       "blocks.0.mlp.fc.bias", "blocks.0.mlp.proj.weight", "blocks.0.mlp.proj.bias"}));
  EXPECT_EQ(block->parameters()[8]->value.shape(), (Shape{kHidden, kDim}));
  EXPECT_EQ(block->parameters()[10]->value.shape(), (Shape{kDim, kHidden}));
}

// The block equals the same computation written out with the separate layers.
TEST(TransformerBlock, ForwardMatchesComposition) {
  auto block = make_block();
  randomize_parameters(*block, 3);
  LayerNorm ln1("blocks.0.ln1", kDim), ln2("blocks.0.ln2", kDim);
  CausalSelfAttention attn("blocks.0.attn", kDim, kHeads);
  Linear fc("blocks.0.mlp.fc", kDim, kHidden), proj("blocks.0.mlp.proj", kHidden, kDim);
  GELU act("blocks.0.mlp.act");
  auto params = block->parameters();
  size_t next = 0;
  for (Layer* l : std::vector<Layer*>{&ln1, &attn, &ln2, &fc, &proj})
    for (Parameter* p : l->parameters()) {
      ASSERT_EQ(p->name, params[next]->name);
      p->value.copy_from(params[next++]->value);
    }
  const Tensor x = uniform_tensor({2, 3, kDim}, 4);
  SavedContext ctx, c;
  const Tensor y = block->forward(x, ctx);
  const Tensor a = attn.forward(ln1.forward(x, c), c);
  Tensor h = x.clone();
  for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] += a.f32()[i];
  const Tensor m = proj.forward(act.forward(fc.forward(ln2.forward(h, c), c), c), c);
  for (int64_t i = 0; i < h.numel(); ++i) EXPECT_EQ(y.f32()[i], h.f32()[i] + m.f32()[i]) << i;
}

TEST(TransformerBlock, GradientsMatchFiniteDifferences) {
  auto block = make_block();
  randomize_parameters(*block, 3);
  check_layer_gradients(*block, uniform_tensor({2, 3, kDim}, 4), {});
}

TEST(TransformerBlock, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_block, {uniform_tensor({2, 3, kDim}, 1), uniform_tensor({1, 4, kDim}, 2)}, 5);
}

TEST(TransformerBlock, WeightGradientsAccumulate) {
  check_weight_accumulates(make_block, uniform_tensor({2, 3, kDim}, 1), uniform_tensor({1, 4, kDim}, 2), 5);
}

TEST(TransformerBlock, BadInputThrows) {
  auto block = make_block();
  SavedContext ctx;
  expect_invalid_argument([&] { block->forward(uniform_tensor({2, 3, 6}, 1), ctx); },
                          {"blocks.0", "[2, 3, 6]"});
  expect_invalid_argument([&] { block->forward(uniform_tensor({3, kDim}, 1), ctx); }, {"blocks.0", "[3, 8]"});
  expect_invalid_argument([] { TransformerBlock("blk", 8, 3, 16); }, {"blk", "heads 3"});
  expect_invalid_argument([] { TransformerBlock("blk", 8, 2, 0); }, {"blk", "mlp_hidden 0"});
}

TEST(TransformerBlock, ContextLifecycle) {
  auto block = make_block();
  randomize_parameters(*block, 1);
  check_context_lifecycle(*block, uniform_tensor({2, 3, kDim}, 2), 3);
}

}  // namespace
}  // namespace pf::test
