// Sequence slices (SavedContext::set_slice): causal attention over S slices of a sequence, each
// attending to the earlier slices' keys and values, equals causal attention over the whole
// sequence; so do the gradients when the backwards run last slice first. Outputs are bitwise
// equal (the fused kernel's arithmetic for a query row does not depend on the other rows,
// runtime/kernels/cpu/flash_attention.h); gradients are not: an earlier slice's key/value gradient
// is summed slice by slice ("kv_grad"), and the weight gradients accumulate slice by slice.
// Tolerance: 1e-5 absolute on values of order 1. Measured here: input gradients within 1.2e-7
// (attention) and 3.6e-7 (transformer block); the printed lines show them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/transformer_block.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

constexpr int64_t kBatch = 2, kSteps = 8, kDim = 8, kHeads = 2;
constexpr float kTolerance = 1e-5f;

// Steps [j T / S, (j + 1) T / S) of an f32 [B, T, D] or i32 [B, T] tensor.
Tensor slice_steps(const Tensor& x, int j, int S) {
  const int64_t B = x.dim(0), T = x.dim(1), D = x.rank() == 3 ? x.dim(2) : 1, n = T / S;
  Shape shape = x.shape();
  shape[1] = n;
  Tensor out = Tensor::empty(shape, x.dtype());
  const size_t width = static_cast<size_t>(D) * 4;  // f32 and i32 elements are 4 bytes
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(out.data<char>() + static_cast<size_t>(b * n) * width,
                x.data<const char>() + static_cast<size_t>(b * T + j * n) * width, static_cast<size_t>(n) * width);
  return out;
}

float max_abs_diff(const Tensor& a, const float* b) {
  float d = 0.0f;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(a.f32()[i] - b[i]));
  return d;
}

// The S slices' outputs concatenated along the steps, as the whole sequence's layout.
void place_slice(const Tensor& slice, int j, int S, Tensor* whole) {
  const int64_t B = whole->dim(0), T = whole->dim(1), D = whole->dim(2), n = T / S;
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(whole->f32() + (b * T + j * n) * D, slice.f32() + b * n * D, static_cast<size_t>(n * D) * 4);
}

std::vector<std::vector<float>> gradients(Layer& layer) {
  std::vector<std::vector<float>> out;
  for (Parameter* p : layer.parameters()) out.emplace_back(p->grad.f32(), p->grad.f32() + p->grad.numel());
  return out;
}

// Runs `layer` on the whole sequence and on S slices (forwards in slice order, fused backwards in
// reverse), with the same output gradient, and compares outputs, input gradients and weight gradients.
void expect_sliced_equals_whole(Layer& layer, int S) {
  const Tensor x = uniform_tensor({kBatch, kSteps, kDim}, 21);
  const Tensor dy = uniform_tensor({kBatch, kSteps, kDim}, 22);
  zero_gradients(layer);
  SavedContext whole_ctx;
  const Tensor y = layer.forward(x, whole_ctx);
  const Tensor dx = layer.backward(whole_ctx, dy);
  const auto whole_grads = gradients(layer);

  zero_gradients(layer);
  std::vector<SavedContext> ctx(static_cast<size_t>(S));
  Tensor y_sliced = Tensor::zeros(y.shape()), dx_sliced = Tensor::zeros(x.shape());
  for (int j = 0; j < S; ++j) {
    ctx[static_cast<size_t>(j)].set_slice(j > 0 ? &ctx[static_cast<size_t>(j - 1)] : nullptr, j * kSteps / S);
    place_slice(layer.forward(slice_steps(x, j, S), ctx[static_cast<size_t>(j)]), j, S, &y_sliced);
  }
  for (int j = S; j-- > 0;)
    place_slice(layer.backward(ctx[static_cast<size_t>(j)], slice_steps(dy, j, S)), j, S, &dx_sliced);
  std::cout << layer.type() << " S " << S << ": output " << max_abs_diff(y_sliced, y.f32()) << ", input gradient "
            << max_abs_diff(dx_sliced, dx.f32()) << " (largest absolute differences)\n";
  EXPECT_LT(max_abs_diff(y_sliced, y.f32()), kTolerance) << "S " << S;
  EXPECT_LT(max_abs_diff(dx_sliced, dx.f32()), kTolerance) << "S " << S;
  const auto sliced_grads = gradients(layer);
  for (size_t i = 0; i < whole_grads.size(); ++i)
    for (size_t k = 0; k < whole_grads[i].size(); ++k)
      ASSERT_NEAR(sliced_grads[i][k], whole_grads[i][k], kTolerance) << "S " << S << " parameter " << i << " entry " << k;
  for (const SavedContext& c : ctx) EXPECT_TRUE(c.empty());  // the key/value cache is gone
}

TEST(SlicedAttention, EqualsWholeSequence) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 4);
  for (int S : {1, 2, 4, 8}) expect_sliced_equals_whole(attn, S);
}

TEST(SlicedAttention, InsideATransformerBlock) {
  TransformerBlock block("block", kDim, kHeads, 16);
  randomize_parameters(block, 5);
  for (int S : {2, 4}) expect_sliced_equals_whole(block, S);
}

// Llama's attention: rotary positions from the slice's offset, grouped key/value heads whose
// gradients from later slices are summed over their query heads.
TEST(SlicedAttention, GroupedQueryWithRotaryPositions) {
  AttentionOptions o;
  o.kv_heads = 1;
  o.bias = false;
  o.rope_theta = 100.0f;
  CausalSelfAttention attn("attn", kDim, kHeads, 0.02f, o);
  randomize_parameters(attn, 4);
  for (int S : {1, 2, 4, 8}) expect_sliced_equals_whole(attn, S);
  LlamaBlockConfig c;
  c.dim = kDim;
  c.heads = kHeads;
  c.kv_heads = 1;
  c.mlp_hidden = 16;
  LlamaBlock block("block", c);
  randomize_parameters(block, 5);
  for (int S : {2, 4}) expect_sliced_equals_whole(block, S);
}

// Without the cache a later slice would attend to itself only: the comparison above must see it.
TEST(SlicedAttention, UnlinkedSlicesDiffer) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 4);
  const Tensor x = uniform_tensor({kBatch, kSteps, kDim}, 21);
  SavedContext whole, first, second;
  const Tensor y = attn.forward(x, whole);
  attn.forward(slice_steps(x, 0, 2), first);
  second.set_slice(nullptr, kSteps / 2);
  const Tensor y1 = attn.forward(slice_steps(x, 1, 2), second);
  Tensor y_whole_1 = slice_steps(y, 1, 2);
  EXPECT_GT(max_abs_diff(y1, y_whole_1.f32()), 1e-3f);
}

TEST(SlicedAttention, BackwardsInForwardOrderAreRefused) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  const Tensor x = uniform_tensor({kBatch, kSteps, kDim}, 21);
  std::vector<SavedContext> ctx(2);
  ctx[1].set_slice(&ctx[0], kSteps / 2);
  attn.forward(slice_steps(x, 0, 2), ctx[0]);
  attn.forward(slice_steps(x, 1, 2), ctx[1]);
  attn.backward(ctx[0], uniform_tensor({kBatch, kSteps / 2, kDim}, 3));
  try {
    attn.backward(ctx[1], uniform_tensor({kBatch, kSteps / 2, kDim}, 4));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(its backward ran first?)"), std::string::npos)
        << e.what();
  }
}

TEST(SlicedEmbedding, PositionsStartAtTheOffset) {
  Embedding emb("emb", 10, kSteps, kDim);
  randomize_parameters(emb, 6);
  std::vector<int32_t> ids(kBatch * kSteps);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7) % 10);
  const Tensor x = int_tensor({kBatch, kSteps}, ids);
  SavedContext whole, slice;
  const Tensor y = emb.forward(x, whole);
  slice.set_slice(nullptr, kSteps / 2);
  const Tensor y1 = emb.forward(slice_steps(x, 1, 2), slice);
  EXPECT_TRUE(bitwise_equal(y1, slice_steps(y, 1, 2)));
  // The position gradient lands on rows offset..offset+T-1.
  zero_gradients(emb);
  emb.backward(slice, Tensor::from_vector({kBatch, kSteps / 2, kDim}, std::vector<float>(kBatch * kSteps / 2 * kDim, 1.0f)));
  const Tensor& dpos = emb.parameters()[1]->grad;
  for (int64_t t = 0; t < kSteps; ++t)
    EXPECT_EQ(dpos.f32()[t * kDim], t >= kSteps / 2 ? static_cast<float>(kBatch) : 0.0f) << "position " << t;
  SavedContext past;
  past.set_slice(nullptr, kSteps - 1);
  expect_invalid_argument([&] { emb.forward(slice_steps(x, 1, 2), past); }, {"runs past seq_len"});
}

}  // namespace
}  // namespace pf::test
