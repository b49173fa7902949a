// Shared checks for layer tests: seeded values, central finite differences of a scalar objective,
// and the contract checks every layer must pass (fused backward == B then W bitwise, W accumulates,
// the saved context is released).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/layers/layer.h"
#include "runtime/tensor/tensor.h"

namespace pf::test {

// Deterministic values uniform in [lo, hi) from a seed (splitmix64), the same on every platform.
std::vector<float> uniform_values(int64_t n, uint64_t seed, float lo, float hi);
Tensor uniform_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Values with |x| in [margin, 1): keeps inputs of kinked functions (ReLU) away from the kink.
Tensor away_from_zero_tensor(const Shape& shape, uint64_t seed, float margin);
Tensor int_tensor(const Shape& shape, const std::vector<int32_t>& values);

// Fills every parameter from the seed: ones-initialised parameters (gains) in [0.5, 1.5), the
// others in [-scale, scale). Gradients are set to zero.
void randomize_parameters(Layer& layer, uint64_t seed, float scale = 0.5f);
void zero_gradients(Layer& layer);
// Copies parameter values from `from` (same names and shapes) into `to`.
void copy_parameters(Layer& from, Layer& to);

// sum_i a[i] * b[i], accumulated in double.
double weighted_sum(const Tensor& a, const Tensor& b);

// Central differences of objective() w.r.t. every element of the f32 tensor `x`, which objective()
// reads: x[i] is set to x[i] +- eps in place (and restored), and the difference is divided by the
// step actually taken in f32.
std::vector<double> numeric_gradient(const Tensor& x, float eps, const std::function<double()>& objective);

struct Tolerance {
  double atol;
  double rtol;
};

// Element-wise |analytic - numeric| <= atol + rtol * |numeric|; on failure names `what`, the number of
// bad elements and the worst one.
::testing::AssertionResult gradients_match(const std::string& what, const Tensor& analytic,
                                           const std::vector<double>& numeric, Tolerance tolerance);

// Defaults for f32 layers: the forward's rounding (~1e-7 relative) puts a few 1e-5 of noise into
// the difference quotient at eps = 5e-3, and the truncation error (eps^2 / 6 times the third
// derivative) stays below that for these smooth functions with O(1) inputs and parameters.
// Over 60 random seeds the worst error was 13% of the allowance (a transformer block; 42% at
// eps = 1e-2, 91% at 1e-3); a 1% error in one term of the attention backward fails the check.
struct GradCheckOptions {
  float eps = 5e-3f;
  Tolerance tolerance = {1e-3, 1e-2};
  uint64_t seed = 1;  // for the objective's weights
};

// objective(layer) = sum(layer(input) * R) with fixed random R. Checks backward_input against finite
// differences w.r.t. the input (when it is f32; for i32 input B must return an undefined Tensor) and
// backward_weight (from zero gradients) against finite differences w.r.t. every parameter element.
void check_layer_gradients(Layer& layer, const Tensor& input, const GradCheckOptions& options);

// Bitwise equality of dtype, shape and bytes.
bool bitwise_equal(const Tensor& a, const Tensor& b);

using LayerMaker = std::function<std::unique_ptr<Layer>()>;

// Two fresh identical layers (make() + randomize_parameters(seed)): one runs forward + backward(),
// the other forward + backward_input + backward_weight, for two micro-batches; outputs, input
// gradients and every parameter gradient must be bitwise equal.
void check_fused_equals_split(const LayerMaker& make, const std::vector<Tensor>& inputs, uint64_t seed);

// W accumulates: one layer running micro-batches a then b ends with gradients equal (to f32
// rounding: |d| <= 1e-5 * (|ga| + |gb|) + 1e-7) to the sum of those of two fresh layers that each
// ran one of them, and not equal to either alone.
void check_weight_accumulates(const LayerMaker& make, const Tensor& input_a, const Tensor& input_b,
                              uint64_t seed);

// ctx.bytes() > 0 after forward; after backward_input the context is empty for parameter-free
// layers and not for the others; after backward_weight it is empty.
void check_context_lifecycle(Layer& layer, const Tensor& input, uint64_t seed);

// fn() throws pf::Error with kInvalidArgument and a message containing every one of `parts`.
void expect_invalid_argument(const std::function<void()>& fn, const std::vector<std::string>& parts);

}  // namespace pf::test
