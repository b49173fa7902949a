// CPU tests of the CUDA kernels' per-element math (runtime/kernels/cuda/element_ops.h): compiled
// for the host, every function must reproduce the CPU layers bitwise when fed the same operands in
// the same order (one exception, the LayerNorm input gradient: GCC contracts the CPU layer's loop
// into FMAs differently, a few ulp). These run on machines without a GPU.
#include "runtime/kernels/cuda/element_ops.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/flash_attention.h"
#include "runtime/kernels/cpu/layer_norm.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/optim/adamw.h"
#include "runtime/tensor/dtype.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Bitwise equality (NaN == NaN with the same payload).
#define EXPECT_SAME_FLOAT(a, b) EXPECT_EQ(bits(a), bits(b)) << #a << " = " << (a) << ", " << #b << " = " << (b)

std::vector<float> sweep(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1));
  return v;
}

TEST(ElementOps, FastExpAndGeluMatchCpuFastMath) {
  for (float x : sweep(-100.0f, 100.0f, 20001)) {
    EXPECT_SAME_FLOAT(cuda::fast_exp(x), cpu::fast_exp(x));
    EXPECT_SAME_FLOAT(cuda::gelu_forward(x), cpu::gelu(x));
    EXPECT_SAME_FLOAT(cuda::gelu_backward(x, 0.25f * x), cpu::gelu_grad(x, 0.25f * x));
  }
}

TEST(ElementOps, Bf16ConversionMatchesDtype) {
  std::mt19937 rng(7);
  std::vector<uint32_t> patterns = {0u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u,
                                    0xffbfffffu, 0x00000001u, 0x007fffffu, 0x3f808000u, 0x3f818000u,
                                    0x3f80ffffu, 0x7f7fffffu, 0x477fe000u};
  for (int i = 0; i < 200000; ++i) patterns.push_back(rng());
  for (uint32_t p : patterns) {
    float f;
    std::memcpy(&f, &p, 4);
    const uint16_t mine = cuda::f32_to_bf16_bits(f);
    ASSERT_EQ(mine, f32_to_bf16(f)) << std::hex << "pattern 0x" << p;
    ASSERT_EQ(bits(cuda::bf16_bits_to_f32(mine)), bits(bf16_to_f32(mine)));
    ASSERT_EQ(cuda::from_f32<cuda::bf16>(f).bits, mine);
  }
}

TEST(ElementOps, ReluAndGeluMatchTheLayers) {
  const std::vector<float> x = sweep(-8.0f, 8.0f, 4001);
  const std::vector<float> dy = random_vector(x.size(), 3);
  const Shape shape = {static_cast<int64_t>(x.size())};
  for (int which = 0; which < 2; ++which) {
    std::unique_ptr<Layer> layer;
    if (which == 0) layer = std::make_unique<ReLU>("act");
    else layer = std::make_unique<GELU>("act");
    SavedContext ctx;
    const std::vector<float> y = layer->forward(Tensor::from_vector(shape, x), ctx).to_vector();
    const std::vector<float> dx = layer->backward_input(ctx, Tensor::from_vector(shape, dy)).to_vector();
    for (size_t i = 0; i < x.size(); ++i) {
      if (which == 0) {
        EXPECT_SAME_FLOAT(cuda::relu_forward(x[i]), y[i]);
        EXPECT_SAME_FLOAT(cuda::relu_backward(x[i], dy[i]), dx[i]);
      } else {
        EXPECT_SAME_FLOAT(cuda::gelu_forward(x[i]), y[i]);
        EXPECT_SAME_FLOAT(cuda::gelu_backward(x[i], dy[i]), dx[i]);
      }
    }
  }
}

// LayerNorm F/B/W with the kernels' element functions and the CPU kernels' row reductions
// (runtime/kernels/cpu/layer_norm.h, standing in for the block reductions) against the CPU layer.
TEST(ElementOps, LayerNormMatchesTheLayer) {
  const int64_t rows = 5, dim = 37;
  const float eps = 1e-5f;
  LayerNorm ln("ln", dim, eps);
  const std::vector<float> gamma = random_vector(dim, 1, 0.5f, 1.5f), beta = random_vector(dim, 2);
  std::memcpy(ln.parameters()[0]->value.f32(), gamma.data(), dim * 4);
  std::memcpy(ln.parameters()[1]->value.f32(), beta.data(), dim * 4);
  const std::vector<float> x = random_vector(rows * dim, 3, -2.0f, 3.0f);
  const std::vector<float> dy = random_vector(rows * dim, 4);
  SavedContext ctx;
  const std::vector<float> y = ln.forward(Tensor::from_vector({rows, dim}, x), ctx).to_vector();
  const std::vector<float> dx = ln.backward_input(ctx, Tensor::from_vector({rows, dim}, dy)).to_vector();
  ln.backward_weight(ctx);
  const std::vector<float> dgamma = ln.parameters()[0]->grad.to_vector();
  const std::vector<float> dbeta = ln.parameters()[1]->grad.to_vector();

  const float inv_dim = 1.0f / static_cast<float>(dim);
  std::vector<float> my_dgamma(dim, 0.0f), my_dbeta(dim, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float mean, sq;
    cpu::row_moments(dim, xr, nullptr, nullptr, &mean, &sq);
    const float rstd = cuda::layer_norm_rstd(sq, inv_dim, eps);
    std::vector<float> xhat_row(dim);
    for (int64_t i = 0; i < dim; ++i) {
      xhat_row[i] = cuda::layer_norm_xhat(xr[i], mean, rstd);
      EXPECT_SAME_FLOAT(cuda::layer_norm_output(xhat_row[i], gamma[i], beta[i]), y[r * dim + i]);
    }
    float sum_d, sum_d_xhat;
    cpu::row_grad_sums(dim, dy.data() + r * dim, gamma.data(), xhat_row.data(), &sum_d, &sum_d_xhat);
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = cuda::layer_norm_xhat(xr[i], mean, rstd);
      // Not bitwise: the CPU build (-O3 -march=x86-64-v3) lets GCC contract a*b+c into FMAs, and
      // it contracts the layer's loop differently from this one. A few ulp.
      const float want = dx[r * dim + i];
      EXPECT_NEAR(cuda::layer_norm_input_grad(dy[r * dim + i], gamma[i], xhat, rstd, sum_d * inv_dim,
                                              sum_d_xhat * inv_dim),
                  want, 4e-6 * std::fabs(want) + 1e-9);
      my_dgamma[i] += dy[r * dim + i] * xhat;
      my_dbeta[i] += dy[r * dim + i];
    }
  }
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_SAME_FLOAT(my_dgamma[i], dgamma[i]);
    EXPECT_SAME_FLOAT(my_dbeta[i], dbeta[i]);
  }
}

// The causal softmax of the unfused CPU attention (cpu::attention_reference_forward's probabilities,
// on the attention layer's saved qkv) from softmax_prob.
TEST(ElementOps, CausalSoftmaxMatchesAttentionProbabilities) {
  const int64_t batch = 2, steps = 7, dim = 12, heads = 3, hd = dim / heads;
  CausalSelfAttention attn("attn", dim, heads, 0.5f);
  SavedContext ctx;
  attn.forward(Tensor::from_vector({batch, steps, dim}, random_vector(batch * steps * dim, 5)), ctx);
  const std::vector<float> qkv = ctx.child(1).get("qkv").to_vector();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const cpu::AttentionDims dims{steps, steps, hd, 0};
  std::vector<float> q(steps * hd), k(steps * hd), v(steps * hd), o(steps * hd), s(steps * steps),
      probs(steps * steps);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < steps; ++t) {
        for (int64_t i = 0; i < hd; ++i) {
          q[t * hd + i] = qkv[(b * steps + t) * 3 * dim + h * hd + i];
          k[t * hd + i] = qkv[(b * steps + t) * 3 * dim + dim + h * hd + i];
          v[t * hd + i] = qkv[(b * steps + t) * 3 * dim + 2 * dim + h * hd + i];
        }
      }
      cpu::attention_reference_forward(dims, q.data(), k.data(), v.data(), probs.data(), o.data());
      cpu::gemm(false, true, steps, steps, hd, scale, q.data(), k.data(), 0.0f, s.data());
      const float* p = probs.data();
      for (int64_t i = 0; i < steps; ++i) {
        float m = s[i * steps];
        for (int64_t j = 1; j <= i; ++j) m = s[i * steps + j] > m ? s[i * steps + j] : m;
        float sum = 0.0f;
        for (int64_t j = 0; j <= i; ++j) sum += cuda::fast_exp(s[i * steps + j] - m);
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < steps; ++j) {
          const float want = p[i * steps + j];
          if (j <= i) EXPECT_SAME_FLOAT(cuda::softmax_prob(s[i * steps + j], m, inv), want);
          else EXPECT_EQ(want, 0.0f);
        }
      }
    }
  }
}

// softmax_grad against the softmax Jacobian in double: ds_j = sum_k dp_k dP_k/ds_j.
TEST(ElementOps, SoftmaxGradMatchesJacobian) {
  const int n = 9;
  const std::vector<float> s = random_vector(n, 8, -3.0f, 3.0f), dp = random_vector(n, 9);
  double m = s[0];
  for (float v : s) m = std::fmax(m, v);
  std::vector<double> p(n);
  double sum = 0.0;
  for (int j = 0; j < n; ++j) sum += (p[j] = std::exp(s[j] - m));
  for (auto& v : p) v /= sum;
  float dot = 0.0f;
  for (int j = 0; j < n; ++j) dot += static_cast<float>(p[j]) * dp[j];
  for (int j = 0; j < n; ++j) {
    double want = 0.0;
    for (int k = 0; k < n; ++k) want += dp[k] * p[k] * ((k == j ? 1.0 : 0.0) - p[j]);
    EXPECT_NEAR(cuda::softmax_grad(static_cast<float>(p[j]), dp[j], dot), want, 1e-6);
  }
}

TEST(ElementOps, CrossEntropyMatchesTheLoss) {
  const int64_t rows = 6, classes = 11;
  const float scale = 0.25f;
  const std::vector<float> x = random_vector(rows * classes, 10, -4.0f, 4.0f);
  const std::vector<int32_t> t = random_ids(rows, 11, classes);
  CrossEntropyLoss loss;
  SavedContext ctx;
  const float cpu_loss = loss.forward(Tensor::from_vector({rows, classes}, x), Tensor::from_ints({rows}, t),
                                      scale, ctx);
  const std::vector<float> cpu_grad = loss.backward(ctx).to_vector();
  double total = 0.0;
  const double coef = static_cast<double>(scale) / static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * classes;
    float m = xr[0];
    for (int64_t c = 1; c < classes; ++c) m = xr[c] > m ? xr[c] : m;
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += cuda::cross_entropy_exp(xr[c], m);
    total += cuda::cross_entropy_row_loss(m, sum, xr[t[r]]);
    for (int64_t c = 0; c < classes; ++c) {
      EXPECT_SAME_FLOAT(cuda::cross_entropy_grad(xr[c], m, 1.0 / sum, c == t[r], coef), cpu_grad[r * classes + c]);
    }
  }
  EXPECT_SAME_FLOAT(static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(rows)), cpu_loss);
}

TEST(ElementOps, AdamWMatchesTheOptimizer) {
  OptimizerConfig config;
  config.kind = OptimizerConfig::Kind::kAdamW;
  config.lr = 3e-3f;
  config.weight_decay = 0.1f;
  config.beta1 = 0.9f;
  config.beta2 = 0.95f;
  config.eps = 1e-8f;
  AdamW opt(config);
  const int64_t n = 257;
  Parameter p = make_parameter("w", {n}, InitSpec::zeros());
  std::vector<float> w = random_vector(n, 12), m(n, 0.0f), v(n, 0.0f);
  std::memcpy(p.value.f32(), w.data(), n * 4);
  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<float> g = random_vector(n, 100 + step);
    std::memcpy(p.grad.f32(), g.data(), n * 4);
    opt.step({&p});
    const cuda::AdamWScalars s =
        cuda::adamw_scalars(config.lr, config.beta1, config.beta2, config.eps, config.weight_decay, step);
    for (int64_t i = 0; i < n; ++i) cuda::adamw_update(w[i], g[i], m[i], v[i], s);
    const std::vector<float> cpu_w = p.value.to_vector();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(w[i]), bits(cpu_w[i])) << "step " << step << " element " << i;
  }
}

}  // namespace
}  // namespace pf::test
