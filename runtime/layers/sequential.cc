#include "runtime/layers/sequential.h"

#include <nlohmann/json.hpp>

namespace pf {

Sequential::Sequential(std::string name, std::vector<std::unique_ptr<Layer>> layers)
    : Layer(std::move(name)), layers_(std::move(layers)) {}

nlohmann::json Sequential::config() const {
  nlohmann::json children = nlohmann::json::array();
  for (const auto& l : layers_) children.push_back(l->config());
  return {{"type", type()}, {"name", name()}, {"layers", children}};
}

std::vector<Parameter*> Sequential::parameters() {
  std::vector<Parameter*> out;
  for (auto& l : layers_) {
    auto p = l->parameters();
    out.insert(out.end(), p.begin(), p.end());
  }
  return out;
}

Tensor Sequential::forward(const Tensor& input, SavedContext& ctx) {
  Tensor x = input;
  for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->forward(x, ctx.child(i));
  return x;
}

Tensor Sequential::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  Tensor g = grad_output;
  for (size_t i = layers_.size(); i-- > 0;) g = layers_[i]->backward_input(ctx.child(i), g);
  return g;
}

void Sequential::backward_weight(SavedContext& ctx) {
  // Reverse order, like the fused backward, so the accumulation order is the same either way.
  for (size_t i = layers_.size(); i-- > 0;) layers_[i]->backward_weight(ctx.child(i));
  ctx.clear();
}

}  // namespace pf
