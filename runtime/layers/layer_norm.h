// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (biased variance).
// backward_input keeps xhat (the normalised input) and the output gradient for backward_weight;
// the per-row 1/std, which only backward_input needs, lives in child context 0 so it can be
// dropped on its own. On CUDA tensors (cuda_dispatch.h) the context holds the input and the per-row
// mean and rstd instead, until backward_weight. The CPU arithmetic is runtime/kernels/cpu/layer_norm.h.
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

  // A residual add folded into the LayerNorm's passes (CPU tensors only; TransformerBlock uses them).
  // forward_residual normalises input + skip, returns the normalised rows and stores input + skip
  // in *sum; the context is the one forward(input + skip) leaves, and both are bitwise equal.
  Tensor forward_residual(const Tensor& input, const Tensor& skip, SavedContext& ctx, Tensor* sum);
  // backward_input(ctx, grad_output) + skip_grad, in one pass.
  Tensor backward_input_residual(SavedContext& ctx, const Tensor& grad_output, const Tensor& skip_grad);

  // Sequence parallelism: keeps the group when it is sequence-parallel (the norm then sees only the
  // member's steps and its weight gradients are summed over the group in backward_weight).
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  int64_t dim() const { return dim_; }
  float eps() const { return eps_; }

 private:
  void check_input(const Tensor& input) const;
  // skip and sum: both null, or the residual of forward_residual.
  Tensor forward_cpu(const Tensor& input, const Tensor* skip, Tensor* sum, SavedContext& ctx);
  Tensor backward_input_cpu(SavedContext& ctx, const Tensor& grad_output, const Tensor* skip_grad);
  Tensor forward_cuda(const Tensor& input, SavedContext& ctx);
  Tensor backward_input_cuda(SavedContext& ctx, const Tensor& grad_output);

  int64_t dim_;
  float eps_;
  Parameter weight_, bias_;
  std::shared_ptr<TensorParallelGroup> sequence_group_;  // set when sequence-parallel
};

}  // namespace pf
