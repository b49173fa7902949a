// y = x + body(x); the body's output must have the input's shape. Child context 0 is the body's.
// The skip path saves nothing, so the context holds exactly what the body keeps.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Residual : public Layer {
 public:
  Residual(std::string name, std::unique_ptr<Layer> body);
  const char* type() const override { return "residual"; }
  // {"layers": [...]}: the body's sub-layers when it is a Sequential, else [the body].
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  Layer& body() const { return *body_; }

 private:
  std::unique_ptr<Layer> body_;
};

}  // namespace pf
