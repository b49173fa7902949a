#include "runtime/layers/llama_block.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/rms_norm.h"

namespace pf {

int64_t llama_default_mlp_hidden(int64_t dim) {
  const int64_t two_thirds = (8 * dim + 2) / 3;  // ceil(8 dim / 3)
  return (two_thirds + 7) / 8 * 8;
}

LlamaBlock::LlamaBlock(std::string name, const LlamaBlockConfig& config) : Layer(std::move(name)), config_(config) {
  const std::string& n = this->name();
  if (config_.kv_heads == 0) config_.kv_heads = config_.heads;
  PF_CHECK_ARG(config_.dim > 0 && config_.heads > 0 && config_.mlp_hidden > 0 && config_.dim % config_.heads == 0,
               "llama_block '", n, "': dim, heads and mlp_hidden must be > 0 with dim divisible by heads, got dim ",
               config_.dim, ", heads ", config_.heads, " and mlp_hidden ", config_.mlp_hidden);
  PF_CHECK_ARG(config_.rope_theta > 0.0f && std::isfinite(config_.rope_theta), "llama_block '", n,
               "': rope_theta must be finite and > 0, got ", config_.rope_theta);
  AttentionOptions attention;
  attention.kv_heads = config_.kv_heads;
  attention.bias = false;
  attention.rope_theta = config_.rope_theta;
  const std::string attn_residual = join_name(n, "attn_residual");
  const std::string mlp_residual = join_name(n, "mlp_residual");
  const std::string mlp = join_name(n, "mlp");
  auto attn = std::make_unique<CausalSelfAttention>(join_name(n, "attn"), config_.dim, config_.heads, 0.02f, attention);
  auto gate_up = std::make_unique<Linear>(join_name(mlp, "gate_up"), config_.dim, 2 * config_.mlp_hidden, false);
  auto down = std::make_unique<Linear>(join_name(mlp, "down"), config_.mlp_hidden, config_.dim, false);
  auto attn_norm = std::make_unique<RMSNorm>(join_name(n, "attn_norm"), config_.dim, config_.norm_eps);
  auto mlp_norm = std::make_unique<RMSNorm>(join_name(n, "mlp_norm"), config_.dim, config_.norm_eps);
  attn_norm_ = attn_norm.get();
  mlp_norm_ = mlp_norm.get();
  attn_ = attn.get();
  gate_up_ = gate_up.get();
  down_ = down.get();
  auto attn_body = make_sequential(
      join_name(attn_residual, "body"),
      layer_list(std::move(attn_norm), std::move(attn)));
  auto mlp_layers = make_sequential(
      mlp, layer_list(std::move(gate_up), std::make_unique<SwiGLU>(join_name(mlp, "act")), std::move(down)));
  auto mlp_body = make_sequential(
      join_name(mlp_residual, "body"),
      layer_list(std::move(mlp_norm), std::move(mlp_layers)));
  body_ = std::make_unique<Sequential>(n, layer_list(std::make_unique<Residual>(attn_residual, std::move(attn_body)),
                                                     std::make_unique<Residual>(mlp_residual, std::move(mlp_body))));
}

nlohmann::json LlamaBlock::config() const {
  return {{"type", type()},
          {"name", name()},
          {"dim", config_.dim},
          {"heads", config_.heads},
          {"kv_heads", config_.kv_heads},
          {"mlp_hidden", config_.mlp_hidden},
          {"rope_theta", config_.rope_theta},
          {"norm_eps", config_.norm_eps}};
}

std::vector<Parameter*> LlamaBlock::parameters() { return body_->parameters(); }

Tensor LlamaBlock::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 3 && input.dim(2) == config_.dim,
               "llama_block '", name(), "': expected f32 input [B, T, ", config_.dim, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ", shape_to_string(input.shape()));
  return body_->forward(input, ctx);
}

Tensor LlamaBlock::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return body_->backward_input(ctx, grad_output);
}

void LlamaBlock::backward_weight(SavedContext& ctx) { body_->backward_weight(ctx); }

void LlamaBlock::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  attn_norm_->split_for_tensor_parallel(group);
  mlp_norm_->split_for_tensor_parallel(group);
  attn_->split_for_tensor_parallel(group);
  // gate_up's output is [gate | up]: each member takes its slice of both halves, so SwiGLU pairs
  // the same columns; down is row-parallel over them.
  split_column_row_pair(*gate_up_, *down_, group, {config_.mlp_hidden, config_.mlp_hidden});
}

}  // namespace pf
