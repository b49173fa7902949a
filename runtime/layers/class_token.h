// Class-token pooling (a Vision Transformer's readout): tokens f32 [B, T, D] -> f32 [B, D], the
// first token (the patch embedding's class token) of each row: y[b] = x[b, 0]. The backward puts
// the output gradient at token 0 of a zero [B, T, D]. No parameters; the forward keeps only the
// input's sizes (no tensor: nothing of the activations is held), and backward_input releases them.
// CUDA tensors run the CUDA backend's copies (runtime/kernels/cuda/patch_embedding.h).
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class ClassToken : public Layer {
 public:
  explicit ClassToken(std::string name) : Layer(std::move(name)) {}
  const char* type() const override { return "class_token"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

}  // namespace pf
