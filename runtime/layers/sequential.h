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

// The layers given, in order, as a vector (for building Sequential and Residual bodies).
template <typename... Layers>
std::vector<std::unique_ptr<Layer>> layer_list(std::unique_ptr<Layers>... layers) {
  std::vector<std::unique_ptr<Layer>> out;
  (out.push_back(std::move(layers)), ...);
  return out;
}

// A Sequential of `layers`, as a Layer.
inline std::unique_ptr<Layer> make_sequential(const std::string& name, std::vector<std::unique_ptr<Layer>> layers) {
  return std::make_unique<Sequential>(name, std::move(layers));
}

}  // namespace pf
