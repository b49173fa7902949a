#include "runtime/layers/transformer_block.h"

#include <cfloat>
#include <cmath>

#include <gtest/gtest.h>

#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/sequential.h"
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

// The block equals the same computation written out with the separate layers, up to the rounding
// of its folded MLP residual: proj accumulates onto h + b, (acc + (h + b)) where the composition
// computes (acc + b) + h, two f32 roundings apart: |y - (h + m)| <= 4 eps (|h| + |m| + 1), the 1
// bounding |b| (parameters within +-0.5).
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
  for (int64_t i = 0; i < h.numel(); ++i) {
    const float hi = h.f32()[i], mi = m.f32()[i];
    EXPECT_NEAR(y.f32()[i], hi + mi, 4 * FLT_EPSILON * (std::fabs(hi) + std::fabs(mi) + 1.0f)) << i;
  }
}

// The unfused composition the block is made of (what it runs on CUDA tensors), with the block's
// names, so parameters copy over by name.
std::unique_ptr<Layer> make_composition(int64_t dim, int64_t heads, int64_t hidden) {
  auto seq = [](const std::string& name, std::vector<std::unique_ptr<Layer>> layers) {
    return std::make_unique<Sequential>(name, std::move(layers));
  };
  auto list = [](auto... layers) {
    std::vector<std::unique_ptr<Layer>> out;
    (out.push_back(std::move(layers)), ...);
    return out;
  };
  auto attn_body = seq("blocks.0.attn_residual.body",
                       list(std::make_unique<LayerNorm>("blocks.0.ln1", dim),
                            std::make_unique<CausalSelfAttention>("blocks.0.attn", dim, heads)));
  auto mlp = seq("blocks.0.mlp", list(std::make_unique<Linear>("blocks.0.mlp.fc", dim, hidden),
                                      std::make_unique<GELU>("blocks.0.mlp.act"),
                                      std::make_unique<Linear>("blocks.0.mlp.proj", hidden, dim)));
  auto mlp_body = seq("blocks.0.mlp_residual.body", list(std::make_unique<LayerNorm>("blocks.0.ln2", dim), std::move(mlp)));
  return seq("blocks.0", list(std::make_unique<Residual>("blocks.0.attn_residual", std::move(attn_body)),
                              std::make_unique<Residual>("blocks.0.mlp_residual", std::move(mlp_body))));
}

// Forward, B and W of the fused block against the composition, over two micro-batches
// accumulating into the gradients, at a width where the LayerNorm's vector path runs (dim 48:
// three 16-wide steps) and at kDim (its scalar tail only). Values and gradients are O(1); the two
// differ by reordered f32 sums and folded adds, which the attention's backward amplifies where its
// terms cancel (the qkv weight gradient differs by up to 1.1e-5 (1 + |composition|) here):
// |fused - composition| <= 2e-5 (1 + |composition|).
TEST(TransformerBlock, MatchesUnfusedComposition) {
  for (int64_t dim : {kDim, int64_t{48}}) {
    const int64_t hidden = dim + 4;
    TransformerBlock block("blocks.0", dim, kHeads, hidden);
    auto composition = make_composition(dim, kHeads, hidden);
    randomize_parameters(block, 7);
    copy_parameters(block, *composition);
    zero_gradients(*composition);
    auto near = [](const Tensor& got, const Tensor& want, const std::string& what) {
      ASSERT_EQ(got.shape(), want.shape()) << what;
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.f32()[i], want.f32()[i], 2e-5 * (1.0 + std::fabs(want.f32()[i]))) << what << " " << i;
    };
    for (uint64_t mb = 0; mb < 2; ++mb) {
      const Tensor x = uniform_tensor({2, 5, dim}, 10 + mb), dy = uniform_tensor({2, 5, dim}, 20 + mb);
      SavedContext c1, c2;
      near(block.forward(x, c1), composition->forward(x, c2), "output");
      near(block.backward_input(c1, dy), composition->backward_input(c2, dy), "input gradient");
      EXPECT_EQ(c1.bytes(), c2.bytes() + hidden * sizeof(float));  // + the fc bias gradient, from B to W
      block.backward_weight(c1);
      composition->backward_weight(c2);
      EXPECT_TRUE(c1.empty());
    }
    auto got = block.parameters(), want = composition->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < got.size(); ++p) near(got[p]->grad, want[p]->grad, got[p]->name);
  }
}

TEST(TransformerBlock, GradientsMatchFiniteDifferencesOnTheVectorPath) {
  TransformerBlock block("blocks.0", 32, 2, 20);
  randomize_parameters(block, 5);
  check_layer_gradients(block, uniform_tensor({1, 3, 32}, 6), {});
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
