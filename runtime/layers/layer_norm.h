// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance).
// backward_input keeps xhat (the normalised input) and the output gradient for backward_weight;
// the per-row 1/std, which only backward_input needs, lives in child context 0 so it can be
// dropped on its own. On CUDA tensors (cuda_dispatch.h) the context holds the input and the per-row
// mean and rstd instead, until backward_weight.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class LayerNorm : public Layer {
 public:
  LayerNorm(std::string name, int64_t dim, float eps = 1e-5f);
  const char* type() const override { return "layernorm"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t dim() const { return dim_; }
  float eps() const { return eps_; }

 private:
  Tensor forward_cuda(const Tensor& input, SavedContext& ctx);
  Tensor backward_input_cuda(SavedContext& ctx, const Tensor& grad_output);

  int64_t dim_;
  float eps_;
  Parameter weight_, bias_;
};

}  // namespace pf
