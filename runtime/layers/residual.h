// y = x + body(x); the body's output must have the input's shape. Child context 0 is the body's.
// The skip path saves nothing, so the context holds exactly what the body keeps.
// With a shortcut layer (a ResNet's projection where the body changes the channels or the size):
// y = shortcut(x) + body(x), the two outputs of the same shape; child context 1 is the shortcut's.
// B: dx = shortcut's (or, without one, the output) gradient + the body's, element by element.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Residual : public Layer {
 public:
  Residual(std::string name, std::unique_ptr<Layer> body, std::unique_ptr<Layer> shortcut = nullptr);
  const char* type() const override { return "residual"; }
  // {"layers": [...]}: the body's sub-layers when it is a Sequential, else [the body]; likewise
  // {"shortcut": [...]} when there is one.
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  Layer& body() const { return *body_; }
  Layer* shortcut() const { return shortcut_.get(); }

 private:
  std::unique_ptr<Layer> body_, shortcut_;
};

}  // namespace pf
