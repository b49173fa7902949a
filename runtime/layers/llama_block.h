// A Llama decoder block: h = x + attn(attn_norm(x)); y = h + mlp(mlp_norm(h)), the norms RMSNorm,
// attn grouped-query attention with rotary positions and no biases (CausalSelfAttention with
// AttentionOptions), mlp = gate_up (Linear(dim, 2 hidden), no bias: Llama's gate_proj and up_proj
// stacked, gate rows first), SwiGLU, down (Linear(hidden, dim), no bias). Sub-layers are named
// <name>.attn_norm, <name>.attn, <name>.mlp_norm, <name>.mlp.gate_up, <name>.mlp.act and
// <name>.mlp.down, so parameters read e.g. "<name>.attn.qkv.weight". It runs as the composition of
// Residual and Sequential, whose B and W are separate, on CPU or CUDA tensors (each sub-layer
// dispatches on its own).
#pragma once

#include "runtime/layers/attention.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/sequential.h"

namespace pf {

class CausalSelfAttention;
class Linear;

struct LlamaBlockConfig {
  int64_t dim = 0, heads = 0;
  int64_t kv_heads = 0;  // 0: heads
  int64_t mlp_hidden = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
};

// Llama's MLP width for a model width: 2/3 of 4 dim (the SwiGLU MLP then has as many parameters
// as a 4 dim GELU MLP), rounded up to a multiple of 8.
int64_t llama_default_mlp_hidden(int64_t dim);

class LlamaBlock : public Layer {
 public:
  LlamaBlock(std::string name, const LlamaBlockConfig& config);
  const char* type() const override { return "llama_block"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;
  // Tensor parallelism (Megatron's split, as transformer_block): the attention by whole query and
  // key/value heads, the MLP's gate_up column-parallel (each member its slice of the gate half and
  // of the up half) and down row-parallel; the RMSNorms whole (under sequence parallelism their
  // weight gradients summed over the group). heads, kv_heads and mlp_hidden must divide by T
  // (kInvalidArgument naming the numbers).
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  const LlamaBlockConfig& block_config() const { return config_; }

 private:
  LlamaBlockConfig config_;
  std::unique_ptr<Sequential> body_;  // [Residual(attn_norm, attn), Residual(mlp_norm, mlp)]
  // Inside body_, for split_for_tensor_parallel.
  RMSNorm* attn_norm_ = nullptr;
  RMSNorm* mlp_norm_ = nullptr;
  CausalSelfAttention* attn_ = nullptr;
  Linear* gate_up_ = nullptr;
  Linear* down_ = nullptr;
};

}  // namespace pf
