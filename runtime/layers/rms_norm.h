// RMSNorm (Llama): y = x * rstd * weight over the last dimension, rstd = 1 / sqrt(mean(x^2) + eps);
// no mean is subtracted and there is no bias. As in Hugging Face's LlamaRMSNorm, the statistics and
// the product are computed in f32. backward_input keeps xhat = x * rstd and the output gradient for
// backward_weight; the per-row rstd, which only backward_input needs, lives in child context 0 so it
// is dropped on its own. CUDA tensors keep the same context, computed by the CUDA backend
// (runtime/kernels/cuda/rms_norm.h; sums in a fixed block order, so deterministic too).
//   B: dx = rstd * (dy o w - xhat * mean(dy o w o xhat))      W: dw += sum over rows of dy o xhat
// Every sum runs in index order, so results are deterministic.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class RMSNorm : public Layer {
 public:
  RMSNorm(std::string name, int64_t dim, float eps = 1e-5f);
  const char* type() const override { return "rmsnorm"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  // Sequence parallelism: keeps the group when it is sequence-parallel (the norm then sees only the
  // member's steps and its weight gradients are summed over the group in backward_weight).
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  int64_t dim() const { return dim_; }
  float eps() const { return eps_; }

 private:
  Tensor backward_input_cpu(const Tensor& xhat, const Tensor& rstd, const Tensor& grad_output) const;

  int64_t dim_;
  float eps_;
  Parameter weight_;
  std::shared_ptr<TensorParallelGroup> sequence_group_;  // set when sequence-parallel
};

}  // namespace pf
