// Element-wise activations. Parameter-free: the backward_input releases the whole context.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

// y = max(x, 0); the gradient passes where x > 0.
class ReLU : public Layer {
 public:
  explicit ReLU(std::string name);
  const char* type() const override { return "relu"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

// GPT-2's tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
class GELU : public Layer {
 public:
  explicit GELU(std::string name);
  const char* type() const override { return "gelu"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

}  // namespace pf
