#include "tests/layers/gradient_check.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/core/error.h"

namespace pf::test {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// PF_GRADCHECK_VERBOSE=1 prints the worst error of every comparison (for choosing tolerances).
bool verbose() {
  static const bool on = std::getenv("PF_GRADCHECK_VERBOSE") != nullptr;
  return on;
}

}  // namespace

std::vector<float> uniform_values(int64_t n, uint64_t seed, float lo, float hi) {
  uint64_t state = seed;
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) {
    const double u = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;  // [0, 1)
    v = static_cast<float>(lo + (hi - lo) * u);
  }
  return out;
}

Tensor uniform_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  return Tensor::from_vector(shape, uniform_values(shape_numel(shape), seed, lo, hi));
}

Tensor away_from_zero_tensor(const Shape& shape, uint64_t seed, float margin) {
  std::vector<float> v = uniform_values(shape_numel(shape), seed, -1.0f, 1.0f);
  for (auto& x : v) x = x < 0 ? -margin + x * (1.0f - margin) : margin + x * (1.0f - margin);
  return Tensor::from_vector(shape, v);
}

Tensor int_tensor(const Shape& shape, const std::vector<int32_t>& values) {
  return Tensor::from_ints(shape, values);
}

void randomize_parameters(Layer& layer, uint64_t seed, float scale) {
  uint64_t index = 0;
  for (Parameter* p : layer.parameters()) {
    const bool gain = p->init.kind == InitSpec::Kind::kOnes;
    std::vector<float> v = uniform_values(p->value.numel(), seed * 1000003ull + index++,
                                          gain ? 0.5f : -scale, gain ? 1.5f : scale);
    p->value.copy_from(Tensor::from_vector(p->value.shape(), v));
    p->grad.fill(0.0f);
  }
}

void zero_gradients(Layer& layer) {
  for (Parameter* p : layer.parameters()) p->grad.fill(0.0f);
}

void copy_parameters(Layer& from, Layer& to) {
  auto a = from.parameters();
  auto b = to.parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i]->name, b[i]->name);
    b[i]->value.copy_from(a[i]->value);
  }
}

double weighted_sum(const Tensor& a, const Tensor& b) {
  const float* x = a.f32();
  const float* w = b.f32();
  double sum = 0.0;
  for (int64_t i = 0, n = a.numel(); i < n; ++i) sum += static_cast<double>(x[i]) * w[i];
  return sum;
}

std::vector<double> numeric_gradient(const Tensor& x, float eps, const std::function<double()>& objective) {
  float* data = x.f32();
  std::vector<double> out(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float original = data[i];
    const float plus = original + eps;
    const float minus = original - eps;
    data[i] = plus;
    const double f_plus = objective();
    data[i] = minus;
    const double f_minus = objective();
    data[i] = original;
    out[static_cast<size_t>(i)] = (f_plus - f_minus) / (static_cast<double>(plus) - minus);
  }
  return out;
}

::testing::AssertionResult gradients_match(const std::string& what, const Tensor& analytic,
                                           const std::vector<double>& numeric, Tolerance tolerance) {
  if (!analytic.defined() || analytic.dtype() != DType::kF32 ||
      analytic.numel() != static_cast<int64_t>(numeric.size())) {
    return ::testing::AssertionFailure() << what << ": analytic gradient "
                                         << shape_to_string(analytic.shape()) << " has "
                                         << analytic.numel() << " elements, expected " << numeric.size();
  }
  const float* a = analytic.f32();
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0.0;
  for (int64_t i = 0; i < analytic.numel(); ++i) {
    const double n = numeric[static_cast<size_t>(i)];
    const double allowed = tolerance.atol + tolerance.rtol * std::fabs(n);
    const double ratio = std::fabs(a[i] - n) / allowed;
    if (!(ratio <= 1.0)) ++bad;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (verbose() && worst >= 0) {
    std::fprintf(stderr, "[gradcheck] %-40s worst error / allowed = %.4f (analytic %.6g, numeric %.6g)\n",
                 what.c_str(), worst_ratio, a[worst], numeric[static_cast<size_t>(worst)]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << analytic.numel() << " elements outside atol "
         << tolerance.atol << " + rtol " << tolerance.rtol << "; worst at " << worst << ": analytic "
         << a[worst] << ", numeric " << numeric[static_cast<size_t>(worst)];
}

void check_layer_gradients(Layer& layer, const Tensor& input_in, const GradCheckOptions& options) {
  const Tensor input = input_in.clone();  // perturbed in place below
  SavedContext probe;
  const Tensor weights = uniform_tensor(layer.forward(input, probe).shape(), options.seed);
  probe.clear();

  zero_gradients(layer);
  SavedContext ctx;
  layer.forward(input, ctx);
  const Tensor grad_input = layer.backward_input(ctx, weights);
  layer.backward_weight(ctx);

  auto objective = [&]() {
    SavedContext c;
    return weighted_sum(layer.forward(input, c), weights);
  };
  if (input.dtype() == DType::kF32) {
    EXPECT_TRUE(gradients_match(layer.name() + " input", grad_input,
                                numeric_gradient(input, options.eps, objective), options.tolerance));
  } else {
    EXPECT_FALSE(grad_input.defined()) << layer.name() << ": B must return an undefined gradient for "
                                       << dtype_name(input.dtype()) << " input";
  }
  for (Parameter* p : layer.parameters()) {
    EXPECT_TRUE(gradients_match(p->name, p->grad, numeric_gradient(p->value, options.eps, objective),
                                options.tolerance));
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data<char>(), b.data<char>(), a.nbytes()) == 0;
}

void check_fused_equals_split(const LayerMaker& make, const std::vector<Tensor>& inputs, uint64_t seed) {
  auto fused = make();
  auto split = make();
  randomize_parameters(*fused, seed);
  randomize_parameters(*split, seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SavedContext ctx_fused, ctx_split;
    const Tensor out_fused = fused->forward(inputs[i], ctx_fused);
    const Tensor out_split = split->forward(inputs[i], ctx_split);
    ASSERT_TRUE(bitwise_equal(out_fused, out_split)) << fused->name() << ": forward differs";
    const Tensor grad_output = uniform_tensor(out_fused.shape(), seed + 17 + i);
    const Tensor gi_fused = fused->backward(ctx_fused, grad_output);
    const Tensor gi_split = split->backward_input(ctx_split, grad_output);
    split->backward_weight(ctx_split);
    EXPECT_TRUE(bitwise_equal(gi_fused, gi_split))
        << fused->name() << ": input gradient of micro-batch " << i << " differs";
    EXPECT_TRUE(ctx_fused.empty());
    EXPECT_TRUE(ctx_split.empty());
  }
  auto pf = fused->parameters();
  auto ps = split->parameters();
  ASSERT_EQ(pf.size(), ps.size());
  for (size_t j = 0; j < pf.size(); ++j) {
    EXPECT_TRUE(bitwise_equal(pf[j]->grad, ps[j]->grad)) << pf[j]->name << ": gradient differs";
  }
}

void check_weight_accumulates(const LayerMaker& make, const Tensor& input_a, const Tensor& input_b,
                              uint64_t seed) {
  auto run = [&](Layer& layer, const Tensor& input, uint64_t grad_seed) {
    SavedContext ctx;
    const Tensor out = layer.forward(input, ctx);
    layer.backward_input(ctx, uniform_tensor(out.shape(), grad_seed));
    layer.backward_weight(ctx);
  };
  auto both = make(), only_a = make(), only_b = make();
  for (Layer* l : {both.get(), only_a.get(), only_b.get()}) randomize_parameters(*l, seed);
  run(*both, input_a, seed + 1);
  run(*both, input_b, seed + 2);
  run(*only_a, input_a, seed + 1);
  run(*only_b, input_b, seed + 2);
  auto p = both->parameters(), pa = only_a->parameters(), pb = only_b->parameters();
  ASSERT_FALSE(p.empty()) << both->name() << " has no parameters";
  for (size_t j = 0; j < p.size(); ++j) {
    const float* g = p[j]->grad.f32();
    const float* ga = pa[j]->grad.f32();
    const float* gb = pb[j]->grad.f32();
    int64_t bad = 0;
    bool differs_from_a = false;
    for (int64_t i = 0; i < p[j]->grad.numel(); ++i) {
      const double expected = static_cast<double>(ga[i]) + gb[i];
      if (std::fabs(g[i] - expected) > 1e-5 * (std::fabs(ga[i]) + std::fabs(gb[i])) + 1e-7) ++bad;
      differs_from_a = differs_from_a || std::fabs(g[i] - ga[i]) > 1e-6;
    }
    EXPECT_EQ(bad, 0) << p[j]->name << ": gradient after two micro-batches is not the sum";
    EXPECT_TRUE(differs_from_a) << p[j]->name << ": second micro-batch did not add anything";
  }
}

void check_context_lifecycle(Layer& layer, const Tensor& input, uint64_t seed) {
  SavedContext ctx;
  const Tensor out = layer.forward(input, ctx);
  EXPECT_GT(ctx.bytes(), 0u) << layer.name() << ": forward saved nothing";
  layer.backward_input(ctx, uniform_tensor(out.shape(), seed));
  if (layer.parameters().empty()) {
    EXPECT_TRUE(ctx.empty()) << layer.name() << ": parameter-free layer kept state after B";
  } else {
    EXPECT_FALSE(ctx.empty()) << layer.name() << ": B dropped what W needs";
  }
  layer.backward_weight(ctx);
  EXPECT_TRUE(ctx.empty()) << layer.name() << ": context not empty after W";
  EXPECT_EQ(ctx.bytes(), 0u);
}

void expect_invalid_argument(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message \"" << e.what() << "\" does not contain \"" << part << "\"";
    }
    return;
  }
  ADD_FAILURE() << "expected a kInvalidArgument error";
}

}  // namespace pf::test
