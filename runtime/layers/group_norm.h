// GroupNorm (Wu and He, 2018; PyTorch's GroupNorm): x [B, C, ...] (rank >= 2; e.g. [B, C, H, W]),
// the C channels split into `groups` groups of C / groups consecutive channels; the values of each
// (sample, group) are normalised by their own mean and biased variance (eps inside the square
// root), then scaled and shifted per channel ("<name>.weight" [C], ones; "<name>.bias" [C], zeros).
// The statistics are per sample, so a micro-batch's results do not depend on which other samples
// share it: pipelined training stays bitwise equal to sequential (BatchNorm's would not).
// Sums run in index order in f32. CUDA tensors keep the same context, computed by the CUDA backend
// (runtime/kernels/cuda/group_norm.h: fixed-order block sums, deterministic).
//   B: dx = rstd (g - mean(g) - xhat mean(g xhat)) over the group, g = dy weight[c]
//   W: dweight[c] += sum of dy xhat, dbias[c] += sum of dy over the samples and positions, in order
// The context keeps xhat and (child 0, dropped at B) the per-(sample, group) rstd.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class GroupNorm : public Layer {
 public:
  GroupNorm(std::string name, int64_t channels, int64_t groups, float eps = 1e-5f);
  const char* type() const override { return "groupnorm"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t channels() const { return channels_; }
  int64_t groups() const { return groups_; }

 private:
  Tensor backward_input_cpu(const Tensor& xhat, const Tensor& rstd, const Tensor& grad_output) const;

  int64_t channels_, groups_;
  float eps_;
  Parameter weight_, bias_;
};

}  // namespace pf
