// Causal multi-head self-attention (GPT-2): x [B, T, dim] -> qkv = Linear(dim, 3 dim) split into
// q | k | v (head h uses columns [h*hd, (h+1)*hd) of each), per head softmax(q k^T / sqrt(hd)) with
// position t attending to positions <= t, times v, heads concatenated, then Linear(dim, dim).
// Child contexts: 0 = the qkv Linear, 1 = the attention core, 2 = the output projection. The core
// keeps what backward_input needs (and drops it there): on the CPU the qkv activations, the
// output (the projection's input: no extra bytes) and one log-sum-exp per (row, head, query) —
// the fused kernel (runtime/kernels/cpu/flash_attention.h) recomputes the probabilities blockwise;
// on the GPU qkv and the [B, heads, T, T] probabilities.
//
// Sequence slices (SavedContext::set_slice; CPU only): the forward of a slice attends to the keys
// and values of the earlier slices of its micro-batch, read from their attention-core contexts
// (the key/value cache is those contexts' qkv), with its queries at positions offset + t. Its
// backward adds the gradient of those keys and values to each earlier core's "kv_grad", and adds
// its own "kv_grad" (from the later slices) to its key/value gradient. So slice backwards must run
// last slice first, and a slice's context lives until its own backward.

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
