// The Vision Transformer's parts: bidirectional attention (AttentionOptions::causal false, in the
// attention layer, the fused CPU kernel and the GPT block), the patch embedding and class-token
// pooling. Each against a double-precision evaluation written here from the definitions, finite
// differences, and the layer contract (fused == split bitwise, W accumulates, contexts released);
// their JSON forms; and the "vit" preset, built from JSON, trained a few steps by the
// SequentialTrainer on a small learnable problem, and by pipeline schedules (fused and split
// backwards) bitwise equal to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/interop/hf_models.h"
#include "runtime/kernels/cpu/flash_attention.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/class_token.h"
#include "runtime/layers/layer_factory.h"
#include "runtime/layers/patch_embedding.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

using nlohmann::json;
using Matrix = std::vector<double>;  // row-major

constexpr int64_t kDim = 8, kHeads = 2;

AttentionOptions bidirectional() {
  AttentionOptions o;
  o.causal = false;
  return o;
}

// Worst |actual - expected| over the elements, relative to the largest |expected| (at least 1e-3).
void expect_close(const Tensor& actual, const Matrix& expected, double relative, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  double worst = 0.0, scale = 1e-3;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::fabs(actual.f32()[i] - expected[i]));
    scale = std::max(scale, std::fabs(expected[i]));
  }
  EXPECT_LE(worst, relative * scale) << what << ": worst difference " << worst << " at scale " << scale;
}

double max_difference(const Tensor& a, const Tensor& b) {
  double d = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, static_cast<double>(std::fabs(a.f32()[i] - b.f32()[i])));
  return d;
}

std::vector<std::string> parameter_names(Layer& layer) {
  std::vector<std::string> names;
  for (Parameter* p : layer.parameters()) names.push_back(p->name);
  return names;
}

// ---- the double-precision references ------------------------------------------------------------

// GPT-2 attention with biases on x [B, T, dim]: qkv = x Wqkv^T + bqkv split q | k | v, per head
// softmax(q k^T / sqrt(hd)) over keys j <= t (causal) or all j < T, times v, then the projection.
Matrix attention_ref(const Tensor& x, int64_t heads, bool causal, Layer& attn) {
  const int64_t batch = x.dim(0), steps = x.dim(1), dim = x.dim(2), hd = dim / heads;
  const float* wqkv = attn.parameters()[0]->value.f32();
  const float* bqkv = attn.parameters()[1]->value.f32();
  const float* wp = attn.parameters()[2]->value.f32();
  const float* bp = attn.parameters()[3]->value.f32();
  Matrix qkv(static_cast<size_t>(batch * steps * 3 * dim));
  for (int64_t r = 0; r < batch * steps; ++r)
    for (int64_t o = 0; o < 3 * dim; ++o) {
      double s = bqkv[o];
      for (int64_t i = 0; i < dim; ++i) s += static_cast<double>(wqkv[o * dim + i]) * x.f32()[r * dim + i];
      qkv[r * 3 * dim + o] = s;
    }
  Matrix attended(static_cast<size_t>(batch * steps * dim), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t keys = causal ? t + 1 : steps;
        std::vector<double> w(static_cast<size_t>(keys));
        double top = -1e300, sum = 0.0;
        for (int64_t j = 0; j < keys; ++j) {
          double s = 0.0;
          for (int64_t i = 0; i < hd; ++i)
            s += qkv[(b * steps + t) * 3 * dim + h * hd + i] * qkv[(b * steps + j) * 3 * dim + dim + h * hd + i];
          w[j] = s / std::sqrt(static_cast<double>(hd));
          top = std::max(top, w[j]);
        }
        for (int64_t j = 0; j < keys; ++j) sum += (w[j] = std::exp(w[j] - top));
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t i = 0; i < hd; ++i)
            attended[(b * steps + t) * dim + h * hd + i] +=
                w[j] / sum * qkv[(b * steps + j) * 3 * dim + 2 * dim + h * hd + i];
      }
  Matrix y(attended.size());
  for (int64_t r = 0; r < batch * steps; ++r)
    for (int64_t o = 0; o < dim; ++o) {
      double s = bp[o];
      for (int64_t i = 0; i < dim; ++i) s += static_cast<double>(wp[o * dim + i]) * attended[r * dim + i];
      y[r * dim + o] = s;
    }
  return y;
}

// The patch embedding from its definition: token 0 = cls + positions[0]; token 1 + n = the patch
// at patch row n / (W / p), patch column n % (W / p), flattened (c, py, px), times weight^T, plus
// bias and positions[1 + n].
Matrix patch_embedding_ref(const Tensor& images, const PatchEmbeddingConfig& c, Layer& layer) {
  const int64_t batch = images.dim(0), p = c.patch, across = c.width / p, n = (c.height / p) * across;
  const int64_t k = c.channels * p * p, d = c.dim;
  const float* w = layer.parameters()[0]->value.f32();
  const float* bias = layer.parameters()[1]->value.f32();
  const float* cls = layer.parameters()[2]->value.f32();
  const float* pos = layer.parameters()[3]->value.f32();
  auto pixel = [&](int64_t b, int64_t ch, int64_t y, int64_t x) {
    return static_cast<double>(images.f32()[((b * c.channels + ch) * c.height + y) * c.width + x]);
  };
  Matrix out(static_cast<size_t>(batch * (1 + n) * d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < d; ++i) out[(b * (1 + n)) * d + i] = static_cast<double>(cls[i]) + pos[i];
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = t / across, col = t % across;
      for (int64_t i = 0; i < d; ++i) {
        double s = static_cast<double>(bias[i]) + pos[(1 + t) * d + i];
        for (int64_t ch = 0; ch < c.channels; ++ch)
          for (int64_t py = 0; py < p; ++py)
            for (int64_t px = 0; px < p; ++px)
              s += static_cast<double>(w[i * k + (ch * p + py) * p + px]) * pixel(b, ch, row * p + py, col * p + px);
        out[(b * (1 + n) + 1 + t) * d + i] = s;
      }
    }
  }
  return out;
}

// ---- bidirectional attention ----------------------------------------------------------------------

TEST(BidirectionalAttention, ForwardMatchesReference) {
  // 7 steps: one block; 150 steps: two key blocks (128) and five query blocks (32) in the kernel.
  for (int64_t steps : {int64_t{7}, int64_t{150}}) {
    CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, bidirectional());
    randomize_parameters(attn, 4);
    const Tensor x = uniform_tensor({2, steps, kDim}, 8);
    SavedContext ctx;
    const Tensor y = attn.forward(x, ctx);
    expect_close(y, attention_ref(x, kHeads, /*causal=*/false, attn), 1e-5, "T = " + std::to_string(steps));
    // The same parameters with the mask give another function: the reference above can fail.
    CausalSelfAttention causal("attn", kDim, kHeads);
    copy_parameters(attn, causal);
    SavedContext c2;
    const Tensor yc = causal.forward(x, c2);
    expect_close(yc, attention_ref(x, kHeads, /*causal=*/true, attn), 1e-5, "causal T = " + std::to_string(steps));
    EXPECT_GT(max_difference(y, yc), 1e-3);
  }
}

// The first query sees the last key: changing the last token changes every output row.
TEST(BidirectionalAttention, EveryQuerySeesEveryKey) {
  CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, bidirectional());
  randomize_parameters(attn, 5);
  Tensor x = uniform_tensor({1, 5, kDim}, 3);
  SavedContext c1, c2;
  const Tensor before = attn.forward(x, c1);
  for (int64_t i = 0; i < kDim; ++i) x.f32()[4 * kDim + i] += 0.5f;
  const Tensor after = attn.forward(x, c2);
  for (int64_t t = 0; t < 5; ++t) {
    double d = 0.0;
    for (int64_t i = 0; i < kDim; ++i)
      d = std::max(d, static_cast<double>(std::fabs(before.f32()[t * kDim + i] - after.f32()[t * kDim + i])));
    EXPECT_GT(d, 1e-4) << "row " << t;
  }
}

// The fused kernel without the mask against the unfused reference, forward and backward, over
// several key and query blocks.
TEST(BidirectionalAttention, KernelMatchesUnfusedReference) {
  const int64_t steps = 150, hd = 8;
  cpu::AttentionDims dims{steps, steps, hd, 0, false};
  const Tensor q = uniform_tensor({steps, hd}, 1), k = uniform_tensor({steps, hd}, 2),
               v = uniform_tensor({steps, hd}, 3), dout = uniform_tensor({steps, hd}, 4);
  Tensor probs = Tensor::empty({steps, steps}), dp = Tensor::empty({steps, steps});
  Tensor ref_out = Tensor::empty({steps, hd}), ref_dq = Tensor::empty({steps, hd}),
         ref_dk = Tensor::empty({steps, hd}), ref_dv = Tensor::empty({steps, hd});
  cpu::attention_reference_forward(dims, q.f32(), k.f32(), v.f32(), probs.f32(), ref_out.f32());
  cpu::attention_reference_backward(dims, q.f32(), k.f32(), v.f32(), probs.f32(), dout.f32(), dp.f32(), ref_dq.f32(),
                                    ref_dk.f32(), ref_dv.f32());
  // Every probability is positive: nothing is masked.
  for (int64_t i = 0; i < steps * steps; ++i) ASSERT_GT(probs.f32()[i], 0.0f) << i;
  Tensor work = Tensor::empty({static_cast<int64_t>(cpu::flash_attention_workspace_floats(dims))});
  Tensor out = Tensor::empty({steps, hd}), lse = Tensor::empty({steps}), dq = Tensor::empty({steps, hd}),
         dk = Tensor::empty({steps, hd}), dv = Tensor::empty({steps, hd});
  cpu::flash_attention_forward(dims, {q.f32(), hd}, {k.f32(), hd}, {v.f32(), hd}, {out.f32(), hd}, lse.f32(),
                               work.f32());
  cpu::flash_attention_backward(dims, {q.f32(), hd}, {k.f32(), hd}, {v.f32(), hd}, {out.f32(), hd}, lse.f32(),
                                {dout.f32(), hd}, {dq.f32(), hd}, {dk.f32(), hd}, {dv.f32(), hd}, work.f32());
  EXPECT_LT(max_difference(out, ref_out), 1e-5);
  EXPECT_LT(max_difference(dq, ref_dq), 1e-5);
  EXPECT_LT(max_difference(dk, ref_dk), 1e-5);
  EXPECT_LT(max_difference(dv, ref_dv), 1e-5);
  // A position offset means nothing without the mask.
  dims.offset = 1;
  dims.keys = steps + 1;
  expect_invalid_argument([&] { cpu::flash_attention_workspace_floats(dims); }, {"non-causal", "offset 1"});
}

TEST(BidirectionalAttention, GradientsAndContract) {
  CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, bidirectional());
  randomize_parameters(attn, 4);
  check_layer_gradients(attn, uniform_tensor({2, 5, kDim}, 8), {});
  auto make = [] { return std::make_unique<CausalSelfAttention>("attn", kDim, kHeads, 0.02f, bidirectional()); };
  check_fused_equals_split(make, {uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 40, kDim}, 2)}, 6);
  check_weight_accumulates(make, uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2), 6);
  CausalSelfAttention fresh("attn", kDim, kHeads, 0.02f, bidirectional());
  check_context_lifecycle(fresh, uniform_tensor({2, 3, kDim}, 2), 3);
}

TEST(BidirectionalAttention, RefusesSequenceSlices) {
  CausalSelfAttention attn("blocks.3.attn", kDim, kHeads, 0.02f, bidirectional());
  SavedContext first;
  attn.forward(uniform_tensor({1, 3, kDim}, 1), first);  // the first slice looks like a whole sequence
  SavedContext second;
  second.set_slice(&first, 3);
  expect_invalid_argument([&] { attn.forward(uniform_tensor({1, 3, kDim}, 2), second); },
                          {"attention 'blocks.3.attn'", "sequence slices", "position 3"});
  SavedContext offset_only;
  offset_only.set_slice(nullptr, 4);
  expect_invalid_argument([&] { attn.forward(uniform_tensor({1, 3, kDim}, 2), offset_only); },
                          {"attention 'blocks.3.attn'", "causal false"});
  // The GPT block passes it through.
  TransformerBlock block("blocks.4", kDim, kHeads, 16, /*causal=*/false);
  SavedContext sliced;
  sliced.set_slice(nullptr, 2);
  expect_invalid_argument([&] { block.forward(uniform_tensor({1, 3, kDim}, 2), sliced); }, {"blocks.4.attn"});
}

TEST(BidirectionalAttention, HeadsMustDivideDim) {
  expect_invalid_argument([] { CausalSelfAttention("enc.attn", 10, 4, 0.02f, bidirectional()); },
                          {"'enc.attn'", "dim 10", "heads 4"});
  expect_invalid_argument([] { TransformerBlock("blocks.1", 10, 4, 16, false); }, {"'blocks.1'", "dim 10", "heads 4"});
}

TEST(BidirectionalAttention, Json) {
  auto attn = layer_from_json(json{{"type", "attention"}, {"dim", kDim}, {"heads", kHeads}, {"causal", false}},
                              "enc", "layers[0]");
  EXPECT_FALSE(dynamic_cast<CausalSelfAttention&>(*attn).options().causal);
  EXPECT_EQ(attn->config().at("causal"), false);
  auto causal = layer_from_json(json{{"type", "attention"}, {"dim", kDim}, {"heads", kHeads}}, "dec", "layers[0]");
  EXPECT_TRUE(dynamic_cast<CausalSelfAttention&>(*causal).options().causal);
  EXPECT_FALSE(causal->config().contains("causal"));  // written only when false
  EXPECT_EQ(layer_from_json(attn->config(), "", "")->config(), attn->config());

  auto block = layer_from_json(
      json{{"type", "transformer_block"}, {"dim", kDim}, {"heads", kHeads}, {"mlp_hidden", 12}, {"causal", false}},
      "blocks.0", "layers[1]");
  EXPECT_FALSE(dynamic_cast<TransformerBlock&>(*block).causal());
  EXPECT_EQ(block->config().at("causal"), false);
  EXPECT_EQ(layer_from_json(block->config(), "", "")->config(), block->config());
  EXPECT_FALSE(TransformerBlock("b", kDim, kHeads, 12).config().contains("causal"));
  expect_invalid_argument(
      [] { layer_from_json(json{{"type", "attention"}, {"dim", 8}, {"heads", 2}, {"causal", "no"}}, "a", "layers[2]"); },
      {"layers[2].causal", "true or false"});
}

// GPT-2's attention is causal: a GPT-shaped model with a bidirectional block does not export as one.
TEST(BidirectionalBlock, IsNotGpt2) {
  GptConfig c;
  c.vocab = 11;
  c.seq_len = 6;
  c.d_model = 8;
  c.heads = 2;
  c.layers = 2;
  c.tie_embeddings = true;
  json description = build_gpt(c)->to_json();
  EXPECT_EQ(hf_family_of(*build_model_from_json(description)), HfFamily::kGpt2);
  description["layers"][2]["causal"] = false;  // blocks.1
  expect_invalid_argument([&] { hf_family_of(*build_model_from_json(description)); },
                          {"hf-gpt2", "'blocks.1'", "causal false"});
}

// A bidirectional GPT block: row 0 depends on the last token (not so with the mask), and the
// block's fused CPU passes keep the contract.
TEST(BidirectionalBlock, SeesTheWholeSequenceAndKeepsTheContract) {
  for (bool causal : {false, true}) {
    TransformerBlock block("b", kDim, kHeads, 12, causal);
    randomize_parameters(block, 7);
    Tensor x = uniform_tensor({1, 4, kDim}, 2);
    SavedContext c1, c2;
    const Tensor before = block.forward(x, c1);
    // (Not a constant shift: the block's LayerNorm would remove it.)
    for (int64_t i = 0; i < kDim; ++i) x.f32()[3 * kDim + i] = -x.f32()[3 * kDim + i];
    const Tensor after = block.forward(x, c2);
    double d = 0.0;
    for (int64_t i = 0; i < kDim; ++i) d = std::max(d, static_cast<double>(std::fabs(before.f32()[i] - after.f32()[i])));
    if (causal) {
      EXPECT_EQ(d, 0.0);
    } else {
      EXPECT_GT(d, 1e-4);
    }
  }
  TransformerBlock block("b", kDim, kHeads, 12, false);
  randomize_parameters(block, 7);
  check_layer_gradients(block, uniform_tensor({2, 4, kDim}, 13), {});
  auto make = [] { return std::make_unique<TransformerBlock>("b", kDim, kHeads, 12, false); };
  check_fused_equals_split(make, {uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2)}, 6);
  check_weight_accumulates(make, uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2), 6);
  TransformerBlock fresh("b", kDim, kHeads, 12, false);
  check_context_lifecycle(fresh, uniform_tensor({2, 3, kDim}, 2), 3);
}

// ---- patch embedding --------------------------------------------------------------------------------

PatchEmbeddingConfig patch_config() {
  PatchEmbeddingConfig c;
  c.channels = 3;
  c.height = 4;
  c.width = 6;
  c.patch = 2;
  c.dim = 5;
  c.init_std = 0.03f;
  return c;
}

std::unique_ptr<Layer> make_patch_embedding() { return std::make_unique<PatchEmbedding>("embed", patch_config()); }

TEST(PatchEmbedding, ParametersAndShapes) {
  PatchEmbedding embed("embed", patch_config());
  EXPECT_EQ(parameter_names(embed),
            (std::vector<std::string>{"embed.weight", "embed.bias", "embed.cls", "embed.positions"}));
  EXPECT_EQ(embed.patches(), 6);  // 2 x 3 patches
  EXPECT_EQ(embed.parameters()[0]->value.shape(), (Shape{5, 12}));
  EXPECT_EQ(embed.parameters()[1]->value.shape(), (Shape{5}));
  EXPECT_EQ(embed.parameters()[2]->value.shape(), (Shape{5}));
  EXPECT_EQ(embed.parameters()[3]->value.shape(), (Shape{7, 5}));
  // As the GPT embedding: normal(init_std), the bias zeros.
  for (size_t i : {0u, 2u, 3u}) {
    EXPECT_EQ(embed.parameters()[i]->init.kind, InitSpec::Kind::kNormal);
    EXPECT_FLOAT_EQ(embed.parameters()[i]->init.stddev, 0.03f);
  }
  EXPECT_EQ(embed.parameters()[1]->init.kind, InitSpec::Kind::kZeros);
}

TEST(PatchEmbedding, ForwardMatchesReference) {
  PatchEmbedding embed("embed", patch_config());
  randomize_parameters(embed, 2);
  const Tensor images = uniform_tensor({2, 3 * 4 * 6}, 5, -2.0f, 2.0f);
  SavedContext ctx;
  const Tensor y = embed.forward(images, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 7, 5}));
  expect_close(y, patch_embedding_ref(images, patch_config(), embed), 1e-5, "patch embedding");
  // One patch of one channel: the pixel at (c 1, y 3, x 4) is in patch row 1, column 2 (token
  // 1 + 5) at (c 1, py 1, px 0): changing it moves that token only.
  Tensor moved = images.clone();
  moved.f32()[(0 * 3 + 1) * 24 + 3 * 6 + 4] += 1.0f;
  SavedContext c2;
  const Tensor y2 = embed.forward(moved, c2);
  for (int64_t t = 0; t < 7; ++t) {
    double d = 0.0;
    for (int64_t i = 0; i < 5; ++i) d = std::max(d, static_cast<double>(std::fabs(y.f32()[t * 5 + i] - y2.f32()[t * 5 + i])));
    if (t == 6) {
      for (int64_t i = 0; i < 5; ++i)
        EXPECT_NEAR(y2.f32()[t * 5 + i] - y.f32()[t * 5 + i], embed.parameters()[0]->value.f32()[i * 12 + (1 * 2 + 1) * 2 + 0],
                    1e-5);
    } else {
      EXPECT_EQ(d, 0.0) << "token " << t;
    }
  }
}

TEST(PatchEmbedding, GradientsAndContract) {
  PatchEmbedding embed("embed", patch_config());
  randomize_parameters(embed, 2);
  check_layer_gradients(embed, uniform_tensor({2, 72}, 4), {});
  check_fused_equals_split(make_patch_embedding, {uniform_tensor({2, 72}, 1), uniform_tensor({3, 72}, 2)}, 3);
  check_weight_accumulates(make_patch_embedding, uniform_tensor({2, 72}, 1), uniform_tensor({1, 72}, 2), 3);
  PatchEmbedding fresh("embed", patch_config());
  check_context_lifecycle(fresh, uniform_tensor({2, 72}, 6), 7);
}

TEST(PatchEmbedding, BadInput) {
  PatchEmbeddingConfig c = patch_config();
  c.height = 7;
  expect_invalid_argument([&] { PatchEmbedding("vit.embed", c); }, {"'vit.embed'", "height 7", "patch 2"});
  c = patch_config();
  c.width = 5;
  expect_invalid_argument([&] { PatchEmbedding("vit.embed", c); }, {"'vit.embed'", "width 5", "patch 2"});
  c = patch_config();
  c.dim = 0;
  expect_invalid_argument([&] { PatchEmbedding("vit.embed", c); }, {"'vit.embed'", "> 0"});
  PatchEmbedding embed("vit.embed", patch_config());
  SavedContext ctx;
  expect_invalid_argument([&] { embed.forward(uniform_tensor({2, 71}, 1), ctx); }, {"'vit.embed'", "[2, 71]", "72"});
  expect_invalid_argument([&] { embed.forward(uniform_tensor({2, 3, 24}, 1), ctx); }, {"'vit.embed'", "[2, 3, 24]"});
  expect_invalid_argument([&] { embed.forward(int_tensor({1, 2}, {0, 1}), ctx); }, {"'vit.embed'", "i32"});
  embed.forward(uniform_tensor({2, 72}, 1), ctx);
  expect_invalid_argument([&] { embed.backward_input(ctx, uniform_tensor({2, 6, 5}, 1)); },
                          {"'vit.embed'", "[2, 6, 5]", "[2, 7, 5]"});
}

TEST(PatchEmbedding, Json) {
  const json description = {{"type", "patch_embedding"}, {"channels", 3}, {"height", 4}, {"width", 6},
                            {"patch", 2}, {"dim", 5}, {"init_std", 0.03}};
  auto layer = layer_from_json(description, "embed", "layers[0]");
  EXPECT_STREQ(layer->type(), "patch_embedding");
  EXPECT_EQ(parameter_names(*layer), parameter_names(*make_patch_embedding()));
  EXPECT_EQ(layer_from_json(layer->config(), "", "")->config(), layer->config());
  // The copy computes bitwise the same.
  auto original = make_patch_embedding();
  randomize_parameters(*original, 3);
  copy_parameters(*original, *layer);
  SavedContext a, b;
  const Tensor x = uniform_tensor({2, 72}, 4);
  EXPECT_TRUE(bitwise_equal(original->forward(x, a), layer->forward(x, b)));
  // channels defaults to 1.
  EXPECT_EQ(layer_from_json(json{{"type", "patch_embedding"}, {"height", 4}, {"width", 4}, {"patch", 2}, {"dim", 3}}, "e",
                            "")->config().at("channels"),
            1);
  json bad = description;
  bad["height"] = 5;
  expect_invalid_argument([&] { layer_from_json(bad, "embed", "layers[0]"); },
                          {"layers[0].patch", "height 5", "patch 2"});
  bad = description;
  bad.erase("patch");
  expect_invalid_argument([&] { layer_from_json(bad, "embed", "layers[0]"); }, {"layers[0].patch", "missing"});
  bad = description;
  bad["stride"] = 2;
  expect_invalid_argument([&] { layer_from_json(bad, "embed", "layers[0]"); }, {"layers[0].stride", "unknown field"});
}

// ---- class-token pooling ----------------------------------------------------------------------------

TEST(ClassToken, ForwardAndBackward) {
  ClassToken pool("pool");
  EXPECT_TRUE(pool.parameters().empty());
  const Tensor x = uniform_tensor({3, 4, 5}, 1);
  SavedContext ctx;
  const Tensor y = pool.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{3, 5}));
  Matrix expected;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t i = 0; i < 5; ++i) expected.push_back(x.f32()[b * 20 + i]);
  expect_close(y, expected, 0.0, "token 0");
  EXPECT_EQ(ctx.bytes(), 0u);  // only sizes: no activation is held
  const Tensor dy = uniform_tensor({3, 5}, 2);
  const Tensor dx = pool.backward_input(ctx, dy);
  ASSERT_EQ(dx.shape(), (Shape{3, 4, 5}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t i = 0; i < 5; ++i)
        EXPECT_EQ(dx.f32()[(b * 4 + t) * 5 + i], t == 0 ? dy.f32()[b * 5 + i] : 0.0f);
  EXPECT_TRUE(ctx.empty());
  pool.backward_weight(ctx);
  EXPECT_TRUE(ctx.empty());
}

TEST(ClassToken, GradientsAndContract) {
  ClassToken pool("pool");
  check_layer_gradients(pool, uniform_tensor({2, 3, 4}, 4), {});
  auto make = [] { return std::make_unique<ClassToken>("pool"); };
  check_fused_equals_split(make, {uniform_tensor({2, 3, 4}, 1), uniform_tensor({1, 1, 6}, 2)}, 3);
  auto layer = layer_from_json(json{{"type", "class_token"}}, "pool", "layers[4]");
  EXPECT_EQ(layer->name(), "pool");
  EXPECT_EQ(layer->config(), (json{{"type", "class_token"}, {"name", "pool"}}));
}

TEST(ClassToken, BadInput) {
  ClassToken pool("vit.pool");
  SavedContext ctx;
  expect_invalid_argument([&] { pool.forward(uniform_tensor({2, 5}, 1), ctx); }, {"class_token 'vit.pool'", "[2, 5]"});
  expect_invalid_argument([&] { pool.forward(uniform_tensor({2, 0, 5}, 1), ctx); }, {"'vit.pool'", "T >= 1"});
  pool.forward(uniform_tensor({2, 3, 5}, 1), ctx);
  expect_invalid_argument([&] { pool.backward_input(ctx, uniform_tensor({2, 3, 5}, 1)); },
                          {"'vit.pool'", "[2, 3, 5]", "[2, 5]"});
}

// ---- the vit preset ---------------------------------------------------------------------------------

TEST(VitPreset, BuildsFromJson) {
  auto model = build_model_from_json_text(
      R"({"preset": "vit", "channels": 1, "image_size": 8, "patch": 4, "d_model": 16, "heads": 2, "layers": 2,
          "classes": 3})");
  std::vector<std::string> names, types;
  for (const auto& l : model->layers()) {
    names.push_back(l->name());
    types.push_back(l->type());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"embed", "blocks.0", "blocks.1", "ln_f", "pool", "head"}));
  EXPECT_EQ(types, (std::vector<std::string>{"patch_embedding", "transformer_block", "transformer_block", "layernorm",
                                             "class_token", "linear"}));
  EXPECT_FALSE(dynamic_cast<const TransformerBlock&>(*model->layers()[1]).causal());
  EXPECT_EQ(dynamic_cast<const TransformerBlock&>(*model->layers()[1]).mlp_hidden(), 64);  // 4 * d_model
  EXPECT_EQ(model->input_spec().kind, InputSpec::Kind::kFeatures);
  EXPECT_EQ(model->input_spec().features, 64);
  EXPECT_EQ(model->input_spec().classes, 3);
  ASSERT_NE(model->find_parameter("embed.positions"), nullptr);
  EXPECT_EQ(model->find_parameter("embed.positions")->shape, (Shape{5, 16}));  // class token + 2 x 2 patches
  EXPECT_EQ(model->find_parameter("head.weight")->shape, (Shape{3, 16}));
  // Its model JSON rebuilds it.
  auto copy = build_model_from_json(model->to_json());
  EXPECT_EQ(copy->to_json(), model->to_json());
  // Defaults: 1 x 8 x 8 images, patch 2, 10 classes.
  auto defaults = build_model_from_json_text(R"({"preset": "vit"})");
  EXPECT_EQ(defaults->input_spec().features, 64);
  EXPECT_EQ(defaults->input_spec().classes, 10);
  EXPECT_EQ(defaults->find_parameter("embed.positions")->shape, (Shape{17, 32}));
  EXPECT_EQ(defaults->layers().size(), 6u);
}

TEST(VitPreset, StrictErrors) {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      build_model_from_json_text(text);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "accepted: " << text;
    return "";
  };
  EXPECT_NE(error_of(R"({"preset": "vit", "vocab": 10})").find("vocab"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "vit", "image_size": 9, "patch": 2})").find("image_size 9 is not divisible by patch 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "vit", "d_model": 30, "heads": 4})").find("heads"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "vit", "classes": 0})").find("classes"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "vitt"})").find("known: mlp, gpt, llama"), std::string::npos);
  EXPECT_NE(error_of(R"({"preset": "vitt"})").find("vit"), std::string::npos);
}

// 1 x 8 x 8 images of noise with one bright 4 x 4 quadrant; the label is the quadrant.
Batch quadrant_batch(int64_t rows, uint64_t seed) {
  const std::vector<float> noise = uniform_values(rows * 64, seed, -0.2f, 0.2f);
  std::vector<float> images(noise);
  std::vector<int32_t> labels;
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t q = static_cast<int32_t>((r * 7 + static_cast<int64_t>(seed)) % 4);
    labels.push_back(q);
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 4; ++x) images[r * 64 + (4 * (q / 2) + y) * 8 + 4 * (q % 2) + x] += 1.0f;
  }
  return {Tensor::from_vector({rows, 64}, images), Tensor::from_ints({rows}, labels)};
}

TEST(VitPreset, SequentialTrainerLowersTheLoss) {
  std::shared_ptr<Model> model = build_model_from_json_text(
      R"({"preset": "vit", "image_size": 8, "patch": 4, "d_model": 16, "heads": 2, "layers": 1, "classes": 4})");
  TrainerOptions options;
  options.micro_batches = 2;
  options.seed = 5;
  options.optimizer.lr = 1e-2f;
  SequentialTrainer trainer(model, options);
  double first = 0.0, last = 0.0;
  for (int step = 0; step < 25; ++step) {
    const StepResult r = trainer.step(quadrant_batch(32, static_cast<uint64_t>(step)));
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << step;
    if (step == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_NEAR(first, std::log(4.0), 0.3);
  EXPECT_LT(last, 0.3 * first);
}

std::shared_ptr<Model> tiny_vit() {
  return build_model_from_json_text(
      R"({"preset": "vit", "image_size": 8, "patch": 4, "d_model": 16, "heads": 2, "layers": 2, "classes": 4})");
}

std::vector<float> parameter_values(const Model& model) {
  std::vector<float> out;
  for (Parameter* p : model.parameters()) {
    const std::vector<float> v = p->value.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// 1F1B runs fused backwards, ZB-H1 splits them into B and W (W later, from what B left in the
// contexts): both must give the sequential trainer's parameters bitwise.
TEST(VitPreset, PipelineSchedulesEqualSequentialBitwise) {
  TrainerOptions base;
  base.micro_batches = 4;
  base.seed = 9;
  base.optimizer.lr = 1e-2f;
  auto reference_model = tiny_vit();
  SequentialTrainer reference(reference_model, base);
  for (int step = 0; step < 2; ++step) reference.step(quadrant_batch(16, static_cast<uint64_t>(step)));
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    exec::PipelineOptions o;
    o.base = base;
    o.schedule = schedule;
    o.ranks = 2;
    auto model = tiny_vit();
    exec::PipelineTrainer trainer(model, o);
    for (int step = 0; step < 2; ++step) trainer.step(quadrant_batch(16, static_cast<uint64_t>(step)));
    EXPECT_EQ(parameter_values(*model), parameter_values(*reference_model)) << schedule;
  }
}

}  // namespace
}  // namespace pf::test
