// Causal multi-head self-attention (GPT-2): x [B, T, dim] -> qkv = Linear(dim, 3 dim) split into
// q | k | v (head h uses columns [h*hd, (h+1)*hd) of each), per head softmax(q k^T / sqrt(hd)) with
// position t attending to positions <= t, times v, heads concatenated, then Linear(dim, dim).
// Child contexts: 0 = the qkv Linear, 1 = the attention core (qkv activations and probabilities,
// needed by backward_input only, so it drops them), 2 = the output projection.
#pragma once

#include "runtime/layers/layer.h"
#include "runtime/layers/linear.h"

namespace pf {

class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(std::string name, int64_t dim, int64_t heads, float init_std = 0.02f);
  const char* type() const override { return "attention"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t dim() const { return dim_; }
  int64_t heads() const { return heads_; }

 private:
  int64_t dim_, heads_, head_dim_;
  float init_std_;
  std::unique_ptr<Linear> qkv_, proj_;
};

}  // namespace pf
