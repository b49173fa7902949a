// The Llama-family layers: RMSNorm, SwiGLU, attention with grouped-query heads, rotary positions
// and no biases, the token-only embedding and the Llama block. Each against a double-precision
// evaluation written here from the definitions (Hugging Face's LlamaRMSNorm, LlamaMLP,
// apply_rotary_pos_emb / rotate_half, repeat_kv), finite differences, and the layer contract
// (fused == split bitwise, W accumulates, contexts released). JSON round trips are in
// layer_factory_test.cc, sequence slices in sliced_attention_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/rms_norm.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

constexpr int64_t kDim = 8, kHeads = 4, kKvHeads = 2, kHidden = 12;
constexpr float kTheta = 10000.0f;

using Matrix = std::vector<double>;  // row-major

AttentionOptions llama_attention() {
  AttentionOptions o;
  o.kv_heads = kKvHeads;
  o.bias = false;
  o.rope_theta = kTheta;
  return o;
}

LlamaBlockConfig block_config() {
  LlamaBlockConfig c;
  c.dim = kDim;
  c.heads = kHeads;
  c.kv_heads = kKvHeads;
  c.mlp_hidden = kHidden;
  c.rope_theta = kTheta;
  c.norm_eps = 1e-5f;
  return c;
}

// ---- the double-precision reference -------------------------------------------------------------

Matrix to_double(const Tensor& t) { return Matrix(t.f32(), t.f32() + t.numel()); }

// rows x [out] = rows x [in] times W^T, W [out, in].
Matrix matmul_t(const Matrix& x, int64_t rows, int64_t in, const Tensor& w, int64_t out) {
  Matrix y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[r * in + i] * w.f32()[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

Matrix rms_norm_ref(const Matrix& x, int64_t rows, int64_t dim, const Tensor& w, double eps) {
  Matrix y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int64_t i = 0; i < dim; ++i) ms += x[r * dim + i] * x[r * dim + i];
    const double s = 1.0 / std::sqrt(ms / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * s * w.f32()[i];
  }
  return y;
}

double silu(double a) { return a / (1.0 + std::exp(-a)); }

// x [B, T, dim] -> attention output [B, T, dim] with heads query heads, kv key/value heads, rotary
// positions from `offset`, no biases; weights as the layer's parameters (qkv [(H + 2 KV) hd, dim],
// proj [dim, dim]).
Matrix attention_ref(const Matrix& x, int64_t batch, int64_t steps, int64_t dim, int64_t heads, int64_t kv,
                     double theta, const Tensor& wqkv, const Tensor& wproj) {
  const int64_t hd = dim / heads, width = dim + 2 * kv * hd, half = hd / 2, group = heads / kv;
  Matrix qkv = matmul_t(x, batch * steps, dim, wqkv, width);
  // rotate_half: q * cos + cat(-q2, q1) * sin, angle t / theta^(2i / hd) (exact here, in double).
  for (int64_t r = 0; r < batch * steps; ++r) {
    const double t = static_cast<double>(r % steps);
    for (int64_t h = 0; h < heads + kv; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = t / std::pow(theta, 2.0 * i / hd);
        double* p = &qkv[r * width + h * hd];
        const double x1 = p[i], x2 = p[i + half];
        p[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        p[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
  }
  Matrix attended(static_cast<size_t>(batch * steps * dim), 0.0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t kcol = dim + (h / group) * hd, vcol = dim + kv * hd + (h / group) * hd;  // repeat_kv
      for (int64_t t = 0; t < steps; ++t) {
        std::vector<double> w(static_cast<size_t>(t + 1));
        double max_w = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0.0;
          for (int64_t i = 0; i < hd; ++i)
            s += qkv[(b * steps + t) * width + h * hd + i] * qkv[(b * steps + j) * width + kcol + i];
          w[j] = s / std::sqrt(static_cast<double>(hd));
          max_w = std::max(max_w, w[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (w[j] = std::exp(w[j] - max_w));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            attended[(b * steps + t) * dim + h * hd + i] += w[j] / sum * qkv[(b * steps + j) * width + vcol + i];
      }
    }
  return matmul_t(attended, batch * steps, dim, wproj, dim);
}

void expect_near(const Tensor& actual, const Matrix& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::fabs(actual.f32()[i] - expected[i]));
  EXPECT_LT(worst, tolerance) << what;
}

Parameter* param(Layer& layer, const std::string& name) {
  for (Parameter* p : layer.parameters())
    if (p->name == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return layer.parameters()[0];
}

// ---- RMSNorm --------------------------------------------------------------------------------------

TEST(RMSNorm, ForwardMatchesReference) {
  RMSNorm norm("norm", kDim, 1e-5f);
  randomize_parameters(norm, 2);
  ASSERT_EQ(norm.parameters().size(), 1u);  // a gain, no bias
  const Tensor x = uniform_tensor({2, 3, kDim}, 5, -3.0f, 3.0f);
  SavedContext ctx;
  expect_near(norm.forward(x, ctx), rms_norm_ref(to_double(x), 6, kDim, norm.parameters()[0]->value, 1e-5), 2e-6,
              "rmsnorm");
}

TEST(RMSNorm, GradientsAndContract) {
  RMSNorm norm("norm", kDim);
  randomize_parameters(norm, 2);
  check_layer_gradients(norm, uniform_tensor({2, 3, kDim}, 4), {});
  auto make = [] { return std::make_unique<RMSNorm>("norm", kDim); };
  check_fused_equals_split(make, {uniform_tensor({2, 3, kDim}, 1), uniform_tensor({4, kDim}, 2)}, 3);
  check_weight_accumulates(make, uniform_tensor({2, 3, kDim}, 1), uniform_tensor({1, 2, kDim}, 2), 3);
  RMSNorm fresh("norm", kDim);
  check_context_lifecycle(fresh, uniform_tensor({2, 3, kDim}, 6), 7);
}

TEST(RMSNorm, BadInput) {
  RMSNorm norm("blocks.2.mlp_norm", kDim);
  SavedContext ctx;
  expect_invalid_argument([&] { norm.forward(uniform_tensor({2, 5}, 1), ctx); }, {"blocks.2.mlp_norm", "[2, 5]"});
  expect_invalid_argument([] { RMSNorm("n", 4, 0.0f); }, {"'n'", "eps"});
  norm.forward(uniform_tensor({2, kDim}, 1), ctx);
  expect_invalid_argument([&] { norm.backward_input(ctx, uniform_tensor({3, kDim}, 1)); },
                          {"blocks.2.mlp_norm", "[3, 8]"});
}

// ---- SwiGLU ---------------------------------------------------------------------------------------

TEST(SwiGLU, ForwardMatchesReference) {
  SwiGLU act("act");
  const Tensor x = uniform_tensor({3, 2 * kHidden}, 9, -4.0f, 4.0f);
  SavedContext ctx;
  const Tensor y = act.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{3, kHidden}));
  Matrix expected;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < kHidden; ++i)
      expected.push_back(silu(x.f32()[r * 2 * kHidden + i]) * x.f32()[r * 2 * kHidden + kHidden + i]);
  expect_near(y, expected, 1e-5, "swiglu");
}

TEST(SwiGLU, GradientsAndContract) {
  SwiGLU act("act");
  check_layer_gradients(act, uniform_tensor({2, 3, 2 * kHidden}, 4, -3.0f, 3.0f), {});
  auto make = [] { return std::make_unique<SwiGLU>("act"); };
  check_fused_equals_split(make, {uniform_tensor({2, 10}, 1), uniform_tensor({1, 3, 6}, 2)}, 3);
  SwiGLU fresh("act");
  check_context_lifecycle(fresh, uniform_tensor({2, 8}, 6), 7);
  SavedContext ctx;
  expect_invalid_argument([&] { fresh.forward(uniform_tensor({2, 7}, 1), ctx); }, {"swiglu 'act'", "even", "[2, 7]"});
}

// ---- attention: grouped-query heads, rotary positions, no biases ------------------------------------

TEST(LlamaAttention, ParametersHaveNoBiasAndFewerKeyValueHeads) {
  CausalSelfAttention attn("blocks.0.attn", kDim, kHeads, 0.02f, llama_attention());
  std::vector<std::string> names;
  for (Parameter* p : attn.parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight"}));
  // q: 4 heads of 2, k and v: 2 heads of 2 each.
  EXPECT_EQ(attn.parameters()[0]->value.shape(), (Shape{kDim + 2 * kKvHeads * (kDim / kHeads), kDim}));
  EXPECT_EQ(attn.kv_heads(), kKvHeads);
}

TEST(LlamaAttention, ForwardMatchesReference) {
  for (int64_t kv : {kHeads, kKvHeads, int64_t{1}}) {
    AttentionOptions o = llama_attention();
    o.kv_heads = kv;
    CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, o);
    randomize_parameters(attn, 4);
    const int64_t batch = 2, steps = 7;
    const Tensor x = uniform_tensor({batch, steps, kDim}, 8);
    SavedContext ctx;
    const Tensor y = attn.forward(x, ctx);
    expect_near(y,
                attention_ref(to_double(x), batch, steps, kDim, kHeads, kv, kTheta, attn.parameters()[0]->value,
                              attn.parameters()[1]->value),
                2e-6, "kv_heads " + std::to_string(kv));
  }
}

// Large angles too: theta 10 turns position 6 of pair 0 by 6 radians.
TEST(LlamaAttention, RotationUsesThePositions) {
  AttentionOptions o = llama_attention();
  o.rope_theta = 10.0f;
  CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, o);
  randomize_parameters(attn, 5);
  const Tensor x = uniform_tensor({1, 7, kDim}, 9);
  SavedContext ctx;
  expect_near(attn.forward(x, ctx),
              attention_ref(to_double(x), 1, 7, kDim, kHeads, kKvHeads, 10.0, attn.parameters()[0]->value,
                            attn.parameters()[1]->value),
              2e-6, "theta 10");
  // Without rotation the output differs: the check above can fail.
  o.rope_theta = 0.0f;
  CausalSelfAttention plain("attn", kDim, kHeads, 0.02f, o);
  copy_parameters(attn, plain);
  SavedContext c1, c2;
  const Tensor a = attn.forward(x, c1), b = plain.forward(x, c2);
  double diff = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(a.f32()[i] - b.f32()[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(LlamaAttention, GradientsAndContract) {
  for (int64_t kv : {kKvHeads, int64_t{1}}) {
    AttentionOptions o = llama_attention();
    o.kv_heads = kv;
    CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, o);
    randomize_parameters(attn, 4);
    check_layer_gradients(attn, uniform_tensor({2, 5, kDim}, 8), {});
    auto make = [o] { return std::make_unique<CausalSelfAttention>("attn", kDim, kHeads, 0.02f, o); };
    check_fused_equals_split(make, {uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2)}, 6);
    check_weight_accumulates(make, uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2), 6);
    CausalSelfAttention fresh("attn", kDim, kHeads, 0.02f, o);
    check_context_lifecycle(fresh, uniform_tensor({2, 3, kDim}, 2), 3);
  }
}

TEST(LlamaAttention, BadOptions) {
  AttentionOptions o = llama_attention();
  o.kv_heads = 3;
  expect_invalid_argument([&] { CausalSelfAttention("a", kDim, kHeads, 0.02f, o); }, {"'a'", "kv_heads 3", "heads 4"});
  o = llama_attention();
  expect_invalid_argument([&] { CausalSelfAttention("odd", 12, 4, 0.02f, o); }, {"'odd'", "even", "3"});
  o.rope_theta = -1.0f;
  expect_invalid_argument([&] { CausalSelfAttention("neg", kDim, kHeads, 0.02f, o); }, {"'neg'", "rope_theta"});
}

// ---- embedding without learned positions ----------------------------------------------------------

TEST(TokenEmbedding, TokensOnly) {
  Embedding embed("embed", 10, 4, kDim, 0.02f, false);
  ASSERT_EQ(embed.parameters().size(), 1u);
  EXPECT_EQ(embed.parameters()[0]->name, "embed.token_weight");
  randomize_parameters(embed, 3);
  const Tensor ids = int_tensor({2, 3}, {1, 9, 1, 0, 4, 4});
  SavedContext ctx;
  const Tensor y = embed.forward(ids, ctx);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = 0; i < kDim; ++i)
      ASSERT_EQ(y.f32()[r * kDim + i], embed.parameters()[0]->value.f32()[ids.i32()[r] * kDim + i]);
  check_layer_gradients(embed, ids, {});
  auto make = [] { return std::make_unique<Embedding>("embed", 10, 4, kDim, 0.02f, false); };
  check_fused_equals_split(make, {ids, int_tensor({1, 4}, {2, 2, 3, 9})}, 5);
}

// ---- the block --------------------------------------------------------------------------------------

TEST(LlamaBlock, ParameterNamesAndShapes) {
  LlamaBlock block("blocks.0", block_config());
  std::vector<std::string> names;
  for (Parameter* p : block.parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.attn_norm.weight", "blocks.0.attn.qkv.weight",
                                             "blocks.0.attn.proj.weight", "blocks.0.mlp_norm.weight",
                                             "blocks.0.mlp.gate_up.weight", "blocks.0.mlp.down.weight"}));
  EXPECT_EQ(block.parameters()[4]->value.shape(), (Shape{2 * kHidden, kDim}));
  EXPECT_EQ(block.parameters()[5]->value.shape(), (Shape{kDim, kHidden}));
  EXPECT_EQ(llama_default_mlp_hidden(64), 176);   // ceil(8 * 64 / 3) = 171, up to a multiple of 8
  EXPECT_EQ(llama_default_mlp_hidden(4096), 10928);
}

// h = x + attn(rms(x)); y = h + down(silu(gate(rms(h))) o up(rms(h))), all in double here.
TEST(LlamaBlock, ForwardMatchesReference) {
  LlamaBlock block("b", block_config());
  randomize_parameters(block, 11);
  const int64_t batch = 2, steps = 6, rows = batch * steps;
  const Tensor x = uniform_tensor({batch, steps, kDim}, 12);
  SavedContext ctx;
  const Tensor y = block.forward(x, ctx);

  const Matrix xd = to_double(x);
  const Matrix a = attention_ref(rms_norm_ref(xd, rows, kDim, param(block, "b.attn_norm.weight")->value, 1e-5), batch,
                                 steps, kDim, kHeads, kKvHeads, kTheta, param(block, "b.attn.qkv.weight")->value,
                                 param(block, "b.attn.proj.weight")->value);
  Matrix h(xd.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = xd[i] + a[i];
  const Matrix z = rms_norm_ref(h, rows, kDim, param(block, "b.mlp_norm.weight")->value, 1e-5);
  const Matrix gu = matmul_t(z, rows, kDim, param(block, "b.mlp.gate_up.weight")->value, 2 * kHidden);
  Matrix act(static_cast<size_t>(rows * kHidden));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < kHidden; ++i)
      act[r * kHidden + i] = silu(gu[r * 2 * kHidden + i]) * gu[r * 2 * kHidden + kHidden + i];
  const Matrix m = matmul_t(act, rows, kHidden, param(block, "b.mlp.down.weight")->value, kDim);
  Matrix expected(h.size());
  for (size_t i = 0; i < h.size(); ++i) expected[i] = h[i] + m[i];
  expect_near(y, expected, 1e-5, "llama block");
}

TEST(LlamaBlock, GradientsAndContract) {
  LlamaBlock block("b", block_config());
  randomize_parameters(block, 11);
  check_layer_gradients(block, uniform_tensor({2, 4, kDim}, 13), {});
  auto make = [] { return std::make_unique<LlamaBlock>("b", block_config()); };
  check_fused_equals_split(make, {uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2)}, 6);
  check_weight_accumulates(make, uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2), 6);
  LlamaBlock fresh("b", block_config());
  check_context_lifecycle(fresh, uniform_tensor({2, 3, kDim}, 2), 3);
}

TEST(LlamaBlock, BadConfig) {
  LlamaBlockConfig c = block_config();
  c.kv_heads = 3;
  expect_invalid_argument([&] { LlamaBlock("blocks.7", c); }, {"blocks.7", "kv_heads 3"});
  c = block_config();
  c.rope_theta = 0.0f;
  expect_invalid_argument([&] { LlamaBlock("blocks.7", c); }, {"blocks.7", "rope_theta"});
  LlamaBlock block("blocks.7", block_config());
  SavedContext ctx;
  expect_invalid_argument([&] { block.forward(uniform_tensor({2, 3, 6}, 1), ctx); }, {"blocks.7", "[2, 3, 6]"});
}

}  // namespace
}  // namespace pf::test
