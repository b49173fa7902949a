#include "runtime/layers/cross_entropy.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tests/layers/gradient_check.h"

namespace pf::test {
namespace {

// rows = 2 * 3, classes = 5.
Tensor logits() { return uniform_tensor({2, 3, 5}, 7, -3.0f, 3.0f); }
Tensor targets() { return int_tensor({2, 3}, {0, 4, 2, 2, 1, 3}); }

double reference_loss(const Tensor& x, const Tensor& t, double scale) {
  const int64_t classes = x.dim(-1), rows = x.numel() / classes;
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(x.f32()[r * classes + c]));
    total += std::log(sum) - x.f32()[r * classes + t.i32()[r]];
  }
  return scale * total / rows;
}

TEST(CrossEntropy, LossMatchesReference) {
  CrossEntropyLoss loss;
  EXPECT_STREQ(loss.type(), "cross_entropy");
  SavedContext ctx;
  const Tensor x = logits(), t = targets();
  EXPECT_NEAR(loss.forward(x, t, 0.25f, ctx), reference_loss(x, t, 0.25), 1e-6);
  // Uniform logits: log(C) per row, whatever the targets.
  SavedContext ctx2;
  EXPECT_NEAR(loss.forward(Tensor::zeros({4, 5}), int_tensor({4}, {0, 1, 2, 3}), 1.0f, ctx2), std::log(5.0),
              1e-6);
}

TEST(CrossEntropy, NumericallyStableForLargeLogits) {
  CrossEntropyLoss loss;
  SavedContext ctx;
  const Tensor x = Tensor::from_vector({2, 3}, {1000.0f, 0.0f, -1000.0f, 500.0f, 501.0f, 499.0f});
  const float value = loss.forward(x, int_tensor({2}, {1, 1}), 1.0f, ctx);
  const double row1 = std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0));  // shifted by 501
  EXPECT_NEAR(value, (1000.0 + row1) / 2.0, 1e-3);
  const Tensor g = loss.backward(ctx);
  for (float v : g.to_vector()) EXPECT_TRUE(std::isfinite(v));
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  // The loss is returned in f32 (about 1e-7 relative), so the difference quotient carries ~1e-5 of
  // noise at eps = 1e-2; gradients here are ~1e-2.
  CrossEntropyLoss loss;
  const Tensor x = logits().clone(), t = targets();
  const float scale = 0.5f;
  SavedContext ctx;
  loss.forward(x, t, scale, ctx);
  const Tensor g = loss.backward(ctx);
  EXPECT_EQ(g.shape(), x.shape());
  EXPECT_TRUE(ctx.empty());
  auto objective = [&] {
    SavedContext c;
    return static_cast<double>(loss.forward(x, t, scale, c));
  };
  EXPECT_TRUE(
      gradients_match("cross_entropy logits", g, numeric_gradient(x, 1e-2f, objective), {1e-4, 1e-2}));
  // Each row of the gradient sums to zero (softmax minus one-hot).
  for (int64_t r = 0; r < 6; ++r) {
    double sum = 0.0;
    for (int64_t c = 0; c < 5; ++c) sum += g.f32()[r * 5 + c];
    EXPECT_NEAR(sum, 0.0, 1e-7);
  }
}

TEST(CrossEntropy, BackwardIsDeterministic) {
  CrossEntropyLoss loss;
  SavedContext a, b;
  loss.forward(logits(), targets(), 0.5f, a);
  loss.forward(logits(), targets(), 0.5f, b);
  EXPECT_TRUE(bitwise_equal(loss.backward(a), loss.backward(b)));
}

TEST(CrossEntropy, BadInputThrows) {
  CrossEntropyLoss loss;
  SavedContext ctx;
  expect_invalid_argument([&] { loss.forward(logits(), int_tensor({2, 3}, {0, 4, 2, 5, 1, 3}), 1.0f, ctx); },
                          {"cross_entropy", "target 5", "row 3"});
  expect_invalid_argument([&] { loss.forward(logits(), int_tensor({2, 3}, {0, -2, 2, 1, 1, 3}), 1.0f, ctx); },
                          {"cross_entropy", "target -2", "row 1"});
  expect_invalid_argument([&] { loss.forward(logits(), int_tensor({5}, {0, 1, 2, 3, 4}), 1.0f, ctx); },
                          {"cross_entropy", "[5]", "[2, 3, 5]"});
  expect_invalid_argument([&] { loss.forward(logits(), uniform_tensor({2, 3}, 1), 1.0f, ctx); },
                          {"cross_entropy", "f32"});
  expect_invalid_argument([&] { loss.forward(targets(), targets(), 1.0f, ctx); }, {"cross_entropy", "i32"});
  EXPECT_TRUE(ctx.empty());
}

TEST(CrossEntropy, ContextLifecycle) {
  CrossEntropyLoss loss;
  SavedContext ctx;
  loss.forward(logits(), targets(), 1.0f, ctx);
  EXPECT_GT(ctx.bytes(), 0u);
  loss.backward(ctx);
  EXPECT_TRUE(ctx.empty());
}

}  // namespace
}  // namespace pf::test
