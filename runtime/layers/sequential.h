// Runs sub-layers in order; child context i belongs to sub-layer i.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Sequential : public Layer {
 public:
  Sequential(std::string name, std::vector<std::unique_ptr<Layer>> layers);
  const char* type() const override { return "sequential"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace pf
