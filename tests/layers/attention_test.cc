#include "runtime/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/cpu/flash_attention.h"
#include "runtime/layers/linear.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

constexpr int64_t kDim = 8, kHeads = 2;

std::unique_ptr<Layer> make_attention() {
  return std::make_unique<CausalSelfAttention>("attn", kDim, kHeads);
}

TEST(CausalSelfAttention, Parameters) {
  CausalSelfAttention attn("blocks.0.attn", kDim, kHeads, 0.05f);
  std::vector<std::string> names;
  for (Parameter* p : attn.parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.attn.qkv.weight", "blocks.0.attn.qkv.bias",
                                             "blocks.0.attn.proj.weight", "blocks.0.attn.proj.bias"}));
  EXPECT_EQ(attn.parameters()[0]->value.shape(), (Shape{3 * kDim, kDim}));
  EXPECT_EQ(attn.parameters()[2]->value.shape(), (Shape{kDim, kDim}));
  EXPECT_FLOAT_EQ(attn.parameters()[0]->init.stddev, 0.05f);
}

// A direct double-precision evaluation of the same function, for one (b, t) output row.
TEST(CausalSelfAttention, ForwardMatchesReference) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 4);
  const int64_t batch = 2, steps = 3, hd = kDim / kHeads;
  const Tensor x = uniform_tensor({batch, steps, kDim}, 8);
  SavedContext ctx;
  const Tensor y = attn.forward(x, ctx);
  auto params = attn.parameters();
  const float* wqkv = params[0]->value.f32();
  const float* bqkv = params[1]->value.f32();
  const float* wp = params[2]->value.f32();
  const float* bp = params[3]->value.f32();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> qkv(steps * 3 * kDim);
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t o = 0; o < 3 * kDim; ++o) {
        double s = bqkv[o];
        for (int64_t i = 0; i < kDim; ++i)
          s += static_cast<double>(wqkv[o * kDim + i]) * x.f32()[(b * steps + t) * kDim + i];
        qkv[t * 3 * kDim + o] = s;
      }
    for (int64_t t = 0; t < steps; ++t) {
      std::vector<double> att(kDim, 0.0);
      for (int64_t h = 0; h < kHeads; ++h) {
        std::vector<double> w(t + 1);
        double max_w = -1e300, sum = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0.0;
          for (int64_t i = 0; i < hd; ++i)
            s += qkv[t * 3 * kDim + h * hd + i] * qkv[j * 3 * kDim + kDim + h * hd + i];
          w[j] = s / std::sqrt(static_cast<double>(hd));
          max_w = std::max(max_w, w[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (w[j] = std::exp(w[j] - max_w));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            att[h * hd + i] += w[j] / sum * qkv[j * 3 * kDim + 2 * kDim + h * hd + i];
      }
      for (int64_t o = 0; o < kDim; ++o) {
        double s = bp[o];
        for (int64_t i = 0; i < kDim; ++i) s += static_cast<double>(wp[o * kDim + i]) * att[i];
        EXPECT_NEAR(y.f32()[(b * steps + t) * kDim + o], s, 1e-5) << "b " << b << " t " << t << " o " << o;
      }
    }
  }
}

// max |a - b| / max |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  double d = 0.0, m = 0.0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
    m = std::max(m, std::fabs(static_cast<double>(b.f32()[i])));
  }
  return m > 0.0 ? d / m : d;
}

// The layer (fused core) against the same composition with the unfused reference core
// (cpu::attention_reference_forward / _backward on gathered heads): output, input gradient and
// the four weight gradients within 2e-6 of the largest reference entry (measured: the line printed).
TEST(CausalSelfAttention, MatchesTheUnfusedReferenceCore) {
  for (auto [steps, dim, heads] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 32, 4}, {7, 32, 4}, {64, 64, 4}, {129, 32, 4}, {256, 128, 2}}) {
    const int64_t batch = 2, hd = dim / heads, w = 3 * dim;
    CausalSelfAttention attn("attn", dim, heads);
    randomize_parameters(attn, 7);
    Linear qkv("attn.qkv", dim, 3 * dim), proj("attn.proj", dim, dim);
    const std::vector<Parameter*> ps = attn.parameters();  // qkv.weight, qkv.bias, proj.weight, proj.bias
    const std::vector<Parameter*> rs = {qkv.parameters()[0], qkv.parameters()[1], proj.parameters()[0],
                                        proj.parameters()[1]};
    for (size_t i = 0; i < ps.size(); ++i) {
      rs[i]->value = ps[i]->value.clone();
      rs[i]->grad = Tensor::zeros(ps[i]->value.shape());
    }
    const Tensor x = uniform_tensor({batch, steps, dim}, 8), dy = uniform_tensor({batch, steps, dim}, 9);
    SavedContext ctx;
    const Tensor y = attn.forward(x, ctx);
    const Tensor dx = attn.backward(ctx, dy);

    SavedContext c_qkv, c_proj;
    const Tensor a = qkv.forward(x, c_qkv);
    Tensor attended = Tensor::zeros({batch, steps, dim}), da = Tensor::zeros(a.shape());
    const cpu::AttentionDims dims{steps, steps, hd, 0};
    std::vector<float> q(steps * hd), k(steps * hd), v(steps * hd), o(steps * hd), g(steps * hd),
        dq(steps * hd), dk(steps * hd), dv(steps * hd), dp(steps * steps);
    std::vector<std::vector<float>> probs(batch * heads, std::vector<float>(steps * steps));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = 0; t < steps; ++t)
          for (int64_t i = 0; i < hd; ++i) {
            const float* row = a.f32() + (b * steps + t) * w + h * hd + i;
            q[t * hd + i] = row[0], k[t * hd + i] = row[dim], v[t * hd + i] = row[2 * dim];
          }
        cpu::attention_reference_forward(dims, q.data(), k.data(), v.data(), probs[b * heads + h].data(), o.data());
        for (int64_t t = 0; t < steps; ++t)
          for (int64_t i = 0; i < hd; ++i) attended.f32()[(b * steps + t) * dim + h * hd + i] = o[t * hd + i];
      }
    const Tensor y_ref = proj.forward(attended, c_proj);
    const Tensor d_attended = proj.backward(c_proj, dy);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t t = 0; t < steps; ++t)
          for (int64_t i = 0; i < hd; ++i) {
            const float* row = a.f32() + (b * steps + t) * w + h * hd + i;
            q[t * hd + i] = row[0], k[t * hd + i] = row[dim], v[t * hd + i] = row[2 * dim];
            g[t * hd + i] = d_attended.f32()[(b * steps + t) * dim + h * hd + i];
          }
        cpu::attention_reference_backward(dims, q.data(), k.data(), v.data(), probs[b * heads + h].data(), g.data(),
                                          dp.data(), dq.data(), dk.data(), dv.data());
        for (int64_t t = 0; t < steps; ++t)
          for (int64_t i = 0; i < hd; ++i) {
            float* row = da.f32() + (b * steps + t) * w + h * hd + i;
            row[0] = dq[t * hd + i], row[dim] = dk[t * hd + i], row[2 * dim] = dv[t * hd + i];
          }
      }
    const Tensor dx_ref = qkv.backward(c_qkv, da);
    double worst = 0.0;
    auto expect_close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      const double e = relative_error(got, want);
      worst = std::max(worst, e);
      EXPECT_LE(e, 2e-6) << what << ", T " << steps << " dim " << dim << " heads " << heads;
    };
    expect_close(y, y_ref, "output");
    expect_close(dx, dx_ref, "input gradient");
    for (size_t i = 0; i < ps.size(); ++i) expect_close(ps[i]->grad, rs[i]->grad, ps[i]->name);
    std::cout << "T " << steps << " dim " << dim << " heads " << heads << ": largest relative error " << worst << "\n";
  }
}

TEST(CausalSelfAttention, GradientsMatchFiniteDifferences) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 4);
  check_layer_gradients(attn, uniform_tensor({2, 4, kDim}, 8), {});
}

TEST(CausalSelfAttention, FusedBackwardEqualsSplit) {
  check_fused_equals_split(make_attention,
                           {uniform_tensor({2, 4, kDim}, 1), uniform_tensor({1, 5, kDim}, 2)}, 6);
}

TEST(CausalSelfAttention, WeightGradientsAccumulate) {
  check_weight_accumulates(make_attention, uniform_tensor({2, 4, kDim}, 1),
                           uniform_tensor({1, 5, kDim}, 2), 6);
}

TEST(CausalSelfAttention, IsCausal) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 4);
  const int64_t steps = 6;
  const Tensor x = uniform_tensor({2, steps, kDim}, 8);
  SavedContext ctx;
  const Tensor y = attn.forward(x, ctx);
  for (int64_t t = 0; t + 1 < steps; ++t) {
    // Change every token after t (in both sequences): outputs up to t must not move at all.
    Tensor x2 = x.clone();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = t + 1; s < steps; ++s)
        for (int64_t i = 0; i < kDim; ++i) x2.f32()[(b * steps + s) * kDim + i] += 0.5f + 0.1f * i;
    SavedContext ctx2;
    const Tensor y2 = attn.forward(x2, ctx2);
    bool later_changed = false;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t s = 0; s < steps; ++s)
        for (int64_t i = 0; i < kDim; ++i) {
          const int64_t k = (b * steps + s) * kDim + i;
          if (s <= t) {
            ASSERT_EQ(y.f32()[k], y2.f32()[k]) << "output at t=" << s << " changed with token " << t + 1;
          } else {
            later_changed = later_changed || y.f32()[k] != y2.f32()[k];
          }
        }
    EXPECT_TRUE(later_changed);
  }
}

TEST(CausalSelfAttention, BadInputThrows) {
  CausalSelfAttention attn("blocks.3.attn", kDim, kHeads);
  SavedContext ctx;
  expect_invalid_argument([&] { attn.forward(uniform_tensor({2, 3, 6}, 1), ctx); },
                          {"blocks.3.attn", "[2, 3, 6]"});
  expect_invalid_argument([&] { attn.forward(uniform_tensor({6, kDim}, 1), ctx); },
                          {"blocks.3.attn", "[6, 8]"});
  attn.forward(uniform_tensor({2, 3, kDim}, 1), ctx);
  expect_invalid_argument([&] { attn.backward_input(ctx, uniform_tensor({2, 4, kDim}, 1)); },
                          {"blocks.3.attn", "[2, 4, 8]"});
  expect_invalid_argument([] { CausalSelfAttention("odd", 10, 3); }, {"odd", "10", "3"});
}

TEST(CausalSelfAttention, ContextLifecycle) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  randomize_parameters(attn, 1);
  check_context_lifecycle(attn, uniform_tensor({2, 3, kDim}, 2), 3);
}

TEST(CausalSelfAttention, BackwardInputDropsAttentionState) {
  CausalSelfAttention attn("attn", kDim, kHeads);
  const int64_t batch = 2, steps = 16;
  SavedContext ctx;
  const Tensor x = uniform_tensor({batch, steps, kDim}, 2);
  attn.forward(x, ctx);
  // Saved by F: the qkv input, qkv, the proj input (which the core shares for its backward) and one
  // log-sum-exp per (row, head, query); no [B, heads, T, T] probabilities.
  const size_t row_bytes = batch * steps * kDim * sizeof(float);
  const size_t lse_bytes = batch * kHeads * steps * sizeof(float);
  EXPECT_EQ(ctx.bytes(), row_bytes * (1 + 3 + 1) + lse_bytes);
  EXPECT_EQ(ctx.child(1).bytes(), row_bytes * (3 + 1) + lse_bytes);
  attn.backward_input(ctx, uniform_tensor({batch, steps, kDim}, 3));
  // Left for W: the qkv input and gradient, the proj input and gradient.
  EXPECT_EQ(ctx.bytes(), row_bytes * (1 + 3 + 1 + 1));
}

}  // namespace
}  // namespace pf::test
