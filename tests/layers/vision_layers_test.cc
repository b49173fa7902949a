// The convolutional layers: Conv2d, GroupNorm, max / average / global average pooling and the
// residual with a projection shortcut. Each against a double-precision evaluation written here
// from the definitions (PyTorch's Conv2d, GroupNorm, MaxPool2d, AvgPool2d), finite differences, and
// the layer contract (fused == split bitwise, W accumulates, contexts released). The ResNet preset
// built from these is in vision_models_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/group_norm.h"
#include "runtime/layers/layer_factory.h"
#include "runtime/layers/pooling.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/sequential.h"
#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

using Matrix = std::vector<double>;

void expect_near(const Tensor& actual, const Matrix& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  double worst = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::fabs(actual.f32()[i] - expected[i]));
  EXPECT_LT(worst, tolerance) << what;
}

// y[b, o, oy, ox] = bias[o] + sum over c, ky, kx of w[o, c, ky, kx] x[b, c, oy s - p + ky, ox s - p + kx].
Matrix conv_ref(const Tensor& x, int64_t batch, int64_t in, int64_t h, int64_t w, const Tensor& weight,
                const Tensor* bias, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  Matrix y(static_cast<size_t>(batch * out * oh * ow));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double s = bias ? bias->f32()[o] : 0.0;
          for (int64_t c = 0; c < in; ++c)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                s += static_cast<double>(weight.f32()[((o * in + c) * k + ky) * k + kx]) *
                     x.f32()[((b * in + c) * h + iy) * w + ix];
              }
          y[static_cast<size_t>(((b * out + o) * oh + oy) * ow + ox)] = s;
        }
  return y;
}

Conv2dOptions conv_options(int64_t kernel, int64_t stride, int64_t padding, bool bias = true) {
  Conv2dOptions o;
  o.kernel = kernel;
  o.stride = stride;
  o.padding = padding;
  o.bias = bias;
  return o;
}

// ---- Conv2d ---------------------------------------------------------------------------------------

TEST(Conv2d, ForwardMatchesReference) {
  struct Case {
    int64_t kernel, stride, padding, h, w;
  };
  for (const Case& c : std::vector<Case>{{3, 1, 1, 5, 6}, {3, 2, 1, 7, 5}, {1, 2, 0, 6, 6}, {2, 1, 0, 4, 3}}) {
    Conv2d conv("conv", 3, 4, conv_options(c.kernel, c.stride, c.padding));
    randomize_parameters(conv, 3);
    const Tensor x = uniform_tensor({2, 3, c.h, c.w}, 5, -2.0f, 2.0f);
    SavedContext ctx;
    const Tensor y = conv.forward(x, ctx);
    const int64_t oh = (c.h + 2 * c.padding - c.kernel) / c.stride + 1;
    const int64_t ow = (c.w + 2 * c.padding - c.kernel) / c.stride + 1;
    ASSERT_EQ(y.shape(), (Shape{2, 4, oh, ow}));
    expect_near(y,
                conv_ref(x, 2, 3, c.h, c.w, conv.parameters()[0]->value, &conv.parameters()[1]->value, 4, c.kernel,
                         c.stride, c.padding),
                2e-5, "conv k=" + std::to_string(c.kernel) + " s=" + std::to_string(c.stride));
  }
}

TEST(Conv2d, TakesImageRowsWithTheirSize) {
  Conv2dOptions o = conv_options(3, 1, 1);
  o.height = 4;
  o.width = 5;
  Conv2d conv("stem", 2, 3, o);
  randomize_parameters(conv, 4);
  const Tensor images = uniform_tensor({3, 2, 4, 5}, 6);
  const Tensor rows = images.clone().reshape({3, 40});
  SavedContext a, b;
  EXPECT_TRUE(bitwise_equal(conv.forward(images, a), conv.forward(rows, b)));
  EXPECT_EQ(conv.forward(rows, b).shape(), (Shape{3, 3, 4, 5}));
  // PyTorch's layout and He's initialisation.
  Conv2d fresh("c", 8, 2, conv_options(3, 1, 0));
  EXPECT_EQ(fresh.parameters()[0]->shape, (Shape{2, 8, 3, 3}));
  EXPECT_FLOAT_EQ(fresh.parameters()[0]->init.stddev, std::sqrt(2.0f / 72.0f));
}

TEST(Conv2d, GradientsAndContract) {
  for (const Conv2dOptions& o : {conv_options(3, 1, 1), conv_options(3, 2, 1, false), conv_options(2, 2, 0)}) {
    SCOPED_TRACE("kernel " + std::to_string(o.kernel) + " stride " + std::to_string(o.stride));
    Conv2d conv("conv", 2, 3, o);
    randomize_parameters(conv, 3);
    check_layer_gradients(conv, uniform_tensor({2, 2, 5, 4}, 4), {});
    auto make = [o] { return std::make_unique<Conv2d>("conv", 2, 3, o); };
    check_fused_equals_split(make, {uniform_tensor({2, 2, 5, 4}, 1), uniform_tensor({1, 2, 4, 4}, 2)}, 3);
    check_weight_accumulates(make, uniform_tensor({2, 2, 5, 4}, 1), uniform_tensor({1, 2, 5, 4}, 2), 3);
    Conv2d fresh("conv", 2, 3, o);
    check_context_lifecycle(fresh, uniform_tensor({2, 2, 4, 4}, 6), 7);
  }
}

TEST(Conv2d, BadInput) {
  Conv2dOptions o = conv_options(3, 1, 0);
  o.height = 4;
  o.width = 4;
  Conv2d conv("blocks.1.res.0", 2, 3, o);
  SavedContext ctx;
  expect_invalid_argument([&] { conv.forward(uniform_tensor({2, 3, 4, 4}, 1), ctx); },
                          {"conv2d 'blocks.1.res.0'", "2 input channels", "[2, 3, 4, 4]"});
  expect_invalid_argument([&] { conv.forward(uniform_tensor({2, 30}, 1), ctx); }, {"[B, 32]", "[2, 30]"});
  expect_invalid_argument([&] { conv.forward(uniform_tensor({2, 2, 5, 5}, 1), ctx); }, {"4x4", "[2, 2, 5, 5]"});
  Conv2d plain("c", 1, 1, conv_options(3, 1, 0));
  expect_invalid_argument([&] { plain.forward(uniform_tensor({1, 1, 2, 2}, 1), ctx); }, {"does not fit", "[1, 1, 2, 2]"});
  expect_invalid_argument([] { Conv2d("c", 1, 1, conv_options(3, 1, 3)); }, {"'c'", "padding"});
  expect_invalid_argument([] { Conv2d("c", 1, 0, conv_options(3, 1, 0)); }, {"'c'", "channels"});
  SavedContext fresh;
  plain.forward(uniform_tensor({1, 1, 4, 4}, 1), fresh);
  expect_invalid_argument([&] { plain.backward_input(fresh, uniform_tensor({1, 1, 3, 3}, 1)); }, {"'c'", "[1, 1, 3, 3]"});
}

// ---- GroupNorm ------------------------------------------------------------------------------------

Matrix group_norm_ref(const Tensor& x, int64_t batch, int64_t channels, int64_t spatial, int64_t groups,
                      const Tensor& weight, const Tensor& bias, double eps) {
  Matrix y(static_cast<size_t>(x.numel()));
  const int64_t per = channels / groups, n = per * spatial;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = (b * channels + g * per) * spatial;
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < n; ++i) mean += x.f32()[at + i];
      mean /= n;
      for (int64_t i = 0; i < n; ++i) var += (x.f32()[at + i] - mean) * (x.f32()[at + i] - mean);
      var /= n;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = g * per + i / spatial;
        y[static_cast<size_t>(at + i)] = (x.f32()[at + i] - mean) / std::sqrt(var + eps) * weight.f32()[c] + bias.f32()[c];
      }
    }
  return y;
}

TEST(GroupNorm, ForwardMatchesReference) {
  for (int64_t groups : {1, 2, 6}) {
    GroupNorm norm("gn", 6, groups);
    randomize_parameters(norm, 2);
    const Tensor x = uniform_tensor({2, 6, 3, 4}, 5, -3.0f, 3.0f);
    SavedContext ctx;
    expect_near(norm.forward(x, ctx),
                group_norm_ref(x, 2, 6, 12, groups, norm.parameters()[0]->value, norm.parameters()[1]->value, 1e-5),
                1e-5, "groups " + std::to_string(groups));
  }
}

TEST(GroupNorm, ASampleDoesNotDependOnTheOthersInItsBatch) {
  GroupNorm norm("gn", 4, 2);
  randomize_parameters(norm, 2);
  const Tensor both = uniform_tensor({2, 4, 3, 3}, 5);
  SavedContext a, b;
  const Tensor y = norm.forward(both, a);
  const Tensor first = norm.forward(both.slice_rows(0, 1).clone(), b);
  EXPECT_EQ(std::memcmp(y.f32(), first.f32(), first.nbytes()), 0);
}

TEST(GroupNorm, GradientsAndContract) {
  GroupNorm norm("gn", 4, 2);
  randomize_parameters(norm, 3);
  check_layer_gradients(norm, uniform_tensor({2, 4, 3, 2}, 4), {});
  auto make = [] { return std::make_unique<GroupNorm>("gn", 4, 2); };
  check_fused_equals_split(make, {uniform_tensor({2, 4, 3, 3}, 1), uniform_tensor({1, 4, 5}, 2)}, 3);
  check_weight_accumulates(make, uniform_tensor({2, 4, 3, 3}, 1), uniform_tensor({1, 4, 3, 3}, 2), 3);
  GroupNorm fresh("gn", 4, 2);
  check_context_lifecycle(fresh, uniform_tensor({2, 4, 2, 2}, 6), 7);
}

TEST(GroupNorm, BadInput) {
  expect_invalid_argument([] { GroupNorm("gn", 6, 4); }, {"'gn'", "6 channels", "4 groups"});
  GroupNorm norm("stem_norm", 4, 2);
  SavedContext ctx;
  expect_invalid_argument([&] { norm.forward(uniform_tensor({2, 3, 2, 2}, 1), ctx); }, {"'stem_norm'", "[2, 3, 2, 2]"});
}

// ---- pooling --------------------------------------------------------------------------------------

// Distinct values (a shuffled ramp with steps of 0.05): no ties, and no window's maximum changes
// under the finite differences' steps.
Tensor distinct_tensor(const Shape& shape, uint64_t seed) {
  const int64_t n = shape_numel(shape);
  std::vector<float> order = uniform_values(n, seed, 0.0f, 1.0f);
  std::vector<int64_t> index(static_cast<size_t>(n));
  std::iota(index.begin(), index.end(), 0);
  std::sort(index.begin(), index.end(), [&](int64_t a, int64_t b) { return order[a] < order[b]; });
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(index[i])] = -2.0f + 0.05f * static_cast<float>(i);
  return Tensor::from_vector(shape, values);
}

Matrix pool_ref(const Tensor& x, int64_t planes, int64_t h, int64_t w, int64_t k, int64_t s, bool max) {
  const int64_t oh = (h - k) / s + 1, ow = (w - k) / s + 1;
  Matrix y;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double acc = max ? -1e300 : 0.0;
        for (int64_t ky = 0; ky < k; ++ky)
          for (int64_t kx = 0; kx < k; ++kx) {
            const double v = x.f32()[(p * h + oy * s + ky) * w + ox * s + kx];
            acc = max ? std::max(acc, v) : acc + v / (k * k);
          }
        y.push_back(acc);
      }
  return y;
}

TEST(Pooling, ForwardMatchesReference) {
  const Tensor x = distinct_tensor({2, 3, 6, 5}, 4);
  for (bool max : {true, false}) {
    for (int64_t stride : {1, 2}) {
      Pool2d pool("pool", max ? Pool2d::Mode::kMax : Pool2d::Mode::kAverage, 2, stride);
      SavedContext ctx;
      const Tensor y = pool.forward(x, ctx);
      ASSERT_EQ(y.shape(), (Shape{2, 3, (6 - 2) / stride + 1, (5 - 2) / stride + 1}));
      expect_near(y, pool_ref(x, 6, 6, 5, 2, stride, max), 1e-6, std::string(pool.type()) + " stride " + std::to_string(stride));
    }
  }
  GlobalAvgPool global("pool");
  SavedContext ctx;
  const Tensor y = global.forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  Matrix means(6, 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) means[static_cast<size_t>(i / 30)] += x.f32()[i] / 30.0;
  expect_near(y, means, 1e-6, "global");
}

TEST(Pooling, GradientsAndContract) {
  for (auto mode : {Pool2d::Mode::kMax, Pool2d::Mode::kAverage}) {
    for (int64_t stride : {1, 2}) {
      Pool2d pool("pool", mode, 2, stride);
      SCOPED_TRACE(std::string(pool.type()) + " stride " + std::to_string(stride));
      check_layer_gradients(pool, distinct_tensor({2, 2, 5, 4}, 3), {});
      auto make = [mode, stride] { return std::make_unique<Pool2d>("pool", mode, 2, stride); };
      check_fused_equals_split(make, {distinct_tensor({2, 2, 4, 4}, 1), distinct_tensor({1, 2, 5, 5}, 2)}, 3);
      Pool2d fresh("pool", mode, 2, stride);
      if (mode == Pool2d::Mode::kMax) check_context_lifecycle(fresh, distinct_tensor({2, 2, 4, 4}, 6), 7);
    }
  }
  // The average pools keep no tensor (only sizes), and nothing after B.
  for (bool global : {false, true}) {
    std::unique_ptr<Layer> pool = global ? std::unique_ptr<Layer>(std::make_unique<GlobalAvgPool>("pool"))
                                         : std::make_unique<Pool2d>("pool", Pool2d::Mode::kAverage, 2, 2);
    SavedContext ctx;
    const Tensor y = pool->forward(uniform_tensor({2, 2, 4, 4}, 1), ctx);
    EXPECT_EQ(ctx.bytes(), 0u);
    pool->backward_input(ctx, uniform_tensor(y.shape(), 2));
    EXPECT_TRUE(ctx.empty());
  }
  GlobalAvgPool global("pool");
  check_layer_gradients(global, uniform_tensor({2, 3, 3, 2}, 4), {});
  check_layer_gradients(global, uniform_tensor({2, 3, 5}, 5), {});
  auto make = [] { return std::make_unique<GlobalAvgPool>("pool"); };
  check_fused_equals_split(make, {uniform_tensor({2, 2, 4, 4}, 1), uniform_tensor({1, 2, 3}, 2)}, 3);
}

TEST(Pooling, MaxTakesTheFirstOfEqualValues) {
  Pool2d pool("pool", Pool2d::Mode::kMax, 2, 2);
  const Tensor x = Tensor::from_vector({1, 1, 2, 2}, {1.0f, 3.0f, 3.0f, 2.0f});
  SavedContext ctx;
  EXPECT_EQ(pool.forward(x, ctx).f32()[0], 3.0f);
  const Tensor dx = pool.backward_input(ctx, Tensor::from_vector({1, 1, 1, 1}, {1.0f}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f}));
}

TEST(Pooling, BadInput) {
  Pool2d pool("blocks.2.pool", Pool2d::Mode::kMax, 3, 1);
  SavedContext ctx;
  expect_invalid_argument([&] { pool.forward(uniform_tensor({2, 2, 2, 5}, 1), ctx); },
                          {"max_pool2d 'blocks.2.pool'", "3x3", "[2, 2, 2, 5]"});
  expect_invalid_argument([&] { pool.forward(uniform_tensor({2, 8}, 1), ctx); }, {"'blocks.2.pool'", "[B, C, H, W]"});
  GlobalAvgPool global("gap");
  expect_invalid_argument([&] { global.forward(uniform_tensor({2, 8}, 1), ctx); }, {"global_avg_pool 'gap'", "[2, 8]"});
}

// ---- the residual with a projection shortcut ------------------------------------------------------

std::unique_ptr<Layer> projection_residual() {
  std::vector<std::unique_ptr<Layer>> body;
  body.push_back(std::make_unique<Conv2d>("res.0", 2, 4, conv_options(3, 2, 1, false)));
  body.push_back(std::make_unique<GroupNorm>("res.1", 4, 2));
  body.push_back(std::make_unique<ReLU>("res.2"));
  body.push_back(std::make_unique<Conv2d>("res.3", 4, 4, conv_options(3, 1, 1, false)));
  std::vector<std::unique_ptr<Layer>> shortcut;
  shortcut.push_back(std::make_unique<Conv2d>("res.shortcut.0", 2, 4, conv_options(1, 2, 0, false)));
  shortcut.push_back(std::make_unique<GroupNorm>("res.shortcut.1", 4, 2));
  return std::make_unique<Residual>("res", std::make_unique<Sequential>("res.body", std::move(body)),
                                    std::make_unique<Sequential>("res.shortcut", std::move(shortcut)));
}

TEST(ResidualShortcut, AddsTheShortcutsOutputAndGradients) {
  auto res = projection_residual();
  randomize_parameters(*res, 5);
  ASSERT_EQ(res->parameters().size(), 7u);  // body: conv, gn (2), conv; shortcut: conv, gn (2)
  EXPECT_EQ(res->parameters()[4]->name, "res.shortcut.0.weight");
  const Tensor x = away_from_zero_tensor({2, 2, 4, 4}, 3, 0.05f);
  SavedContext ctx;
  const Tensor y = res->forward(x, ctx);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 2, 2}));
  // y = shortcut(x) + body(x), each run on its own.
  auto& r = static_cast<Residual&>(*res);
  SavedContext a, b;
  const Tensor body = r.body().forward(x, a), skip = r.shortcut()->forward(x, b);
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.f32()[i], skip.f32()[i] + body.f32()[i]) << i;
  check_layer_gradients(*res, x, {});
  check_fused_equals_split(projection_residual, {x, away_from_zero_tensor({1, 2, 4, 4}, 4, 0.05f)}, 3);
  auto fresh = projection_residual();
  check_context_lifecycle(*fresh, x, 7);
}

TEST(ResidualShortcut, JsonRoundTrip) {
  auto res = projection_residual();
  const nlohmann::json config = res->config();
  ASSERT_TRUE(config.contains("shortcut"));
  auto rebuilt = layer_from_json(config, "x", "layers[0]");
  EXPECT_EQ(rebuilt->config(), config);
  ASSERT_EQ(rebuilt->parameters().size(), res->parameters().size());
  for (size_t i = 0; i < res->parameters().size(); ++i)
    EXPECT_EQ(rebuilt->parameters()[i]->name, res->parameters()[i]->name);
  nlohmann::json bad = config;
  bad["shortcut"][0]["in_channels"] = 3;
  auto mismatched = layer_from_json(bad, "x", "layers[0]");
  SavedContext ctx;
  expect_invalid_argument([&] { mismatched->forward(uniform_tensor({1, 2, 4, 4}, 1), ctx); },
                          {"res.shortcut.0", "3 input channels"});
  expect_invalid_argument([&] { layer_from_json({{"type", "conv2d"}, {"in_channels", 1}, {"out_channels", 2}, {"padding", -1}}, "c", "layers[3]"); },
                          {"layers[3].padding"});
}

}  // namespace
}  // namespace pf::test
