#include "runtime/layers/transformer_block.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/cuda_dispatch.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"

namespace pf {

TransformerBlock::TransformerBlock(std::string name, int64_t dim, int64_t heads, int64_t mlp_hidden, bool causal)
    : Layer(std::move(name)), dim_(dim), heads_(heads), mlp_hidden_(mlp_hidden), causal_(causal) {
  PF_CHECK_ARG(dim_ > 0 && heads_ > 0 && mlp_hidden_ > 0 && dim_ % heads_ == 0, "transformer_block '",
               this->name(), "': dim, heads and mlp_hidden must be > 0 with dim divisible by heads, got dim ",
               dim_, ", heads ", heads_, " and mlp_hidden ", mlp_hidden_);
  const std::string& n = this->name();
  const std::string attn_residual = join_name(n, "attn_residual");
  const std::string mlp_residual = join_name(n, "mlp_residual");
  const std::string mlp = join_name(n, "mlp");
  auto ln1 = std::make_unique<LayerNorm>(join_name(n, "ln1"), dim_);
  AttentionOptions attention;
  attention.causal = causal_;
  auto attn = std::make_unique<CausalSelfAttention>(join_name(n, "attn"), dim_, heads_, 0.02f, attention);
  auto ln2 = std::make_unique<LayerNorm>(join_name(n, "ln2"), dim_);
  auto fc = std::make_unique<Linear>(join_name(mlp, "fc"), dim_, mlp_hidden_);
  auto act = std::make_unique<GELU>(join_name(mlp, "act"));
  auto proj = std::make_unique<Linear>(join_name(mlp, "proj"), mlp_hidden_, dim_);
  ln1_ = ln1.get();
  attn_ = attn.get();
  ln2_ = ln2.get();
  fc_ = fc.get();
  act_ = act.get();
  proj_ = proj.get();
  auto attn_body = make_sequential(join_name(attn_residual, "body"), layer_list(std::move(ln1), std::move(attn)));
  auto mlp_body = make_sequential(
      join_name(mlp_residual, "body"),
      layer_list(std::move(ln2), make_sequential(mlp, layer_list(std::move(fc), std::move(act), std::move(proj)))));
  body_ = std::make_unique<Sequential>(
      n, layer_list(std::make_unique<Residual>(attn_residual, std::move(attn_body)),
              std::make_unique<Residual>(mlp_residual, std::move(mlp_body))));
}

nlohmann::json TransformerBlock::config() const {
  nlohmann::json j = {{"type", type()}, {"name", name()}, {"dim", dim_}, {"heads", heads_}, {"mlp_hidden", mlp_hidden_}};
  if (!causal_) j["causal"] = false;
  return j;
}

std::vector<Parameter*> TransformerBlock::parameters() { return body_->parameters(); }

// Contexts as the composition keeps them: child(0) = attention Residual (its child(0) the
// Sequential [ln1, attn]), child(1) = MLP Residual (its child(0) the Sequential [ln2, mlp], mlp's
// children fc, act, proj). The Residuals' "numel" is set too, so either path can read them.
Tensor TransformerBlock::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 3 &&
                   input.dim(2) == dim_,
               "transformer_block '", name(), "': expected f32 input [B, T, ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  if (is_cuda(input)) return body_->forward(input, ctx);
  SavedContext& attn_residual = ctx.child(0);
  SavedContext& attn_body = attn_residual.child(0);
  const Tensor a = attn_->forward(ln1_->forward(input, attn_body.child(0)), attn_body.child(1));
  attn_residual.set_int("numel", input.numel());
  SavedContext& mlp_residual = ctx.child(1);
  SavedContext& mlp_body = mlp_residual.child(0);
  Tensor h;  // input + a
  const Tensor z = ln2_->forward_residual(input, a, mlp_body.child(0), &h);
  SavedContext& mlp = mlp_body.child(1);
  const Tensor post = act_->forward(fc_->forward(z, mlp.child(0)), mlp.child(1));
  Tensor output = proj_->forward_residual(post, h, mlp.child(2));
  mlp_residual.set_int("numel", h.numel());
  return output;
}

Tensor TransformerBlock::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  if (is_cuda(grad_output)) return body_->backward_input(ctx, grad_output);
  return backward_cpu(ctx, grad_output, false);
}

void TransformerBlock::backward_weight(SavedContext& ctx) { body_->backward_weight(ctx); }

Tensor TransformerBlock::backward(SavedContext& ctx, const Tensor& grad_output) {
  if (is_cuda(grad_output)) return Layer::backward(ctx, grad_output);
  return backward_cpu(ctx, grad_output, true);
}

// With `weights`, each sub-layer's W runs as soon as its gradients are there, and each column
// split's all-reduce of its input gradient (the MLP's fc, the attention's qkv) runs while the W
// that do not need it compute (Megatron's overlap). The W run in backward_weight's order and each
// parameter's gradient gets the same one addition, so the bits are those of B then W.
Tensor TransformerBlock::backward_cpu(SavedContext& ctx, const Tensor& grad_output, bool weights) {
  SavedContext& attn_body = ctx.child(0).child(0);
  SavedContext& mlp_body = ctx.child(1).child(0);
  SavedContext& mlp = mlp_body.child(1);
  const int64_t numel = ctx.child(1).get_int("numel");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.numel() == numel,
               "transformer_block '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output (", numel, " elements)");
  const Tensor d_post = proj_->backward_input(mlp.child(2), grad_output);
  Tensor fc_bias_grad;
  const Tensor d_pre = act_->backward_input_column_sums(mlp.child(1), d_post, &fc_bias_grad);
  const Tensor d_z = fc_->backward_input_bias_grad(mlp.child(0), d_pre, fc_bias_grad, weights);
  if (weights) {
    proj_->backward_weight(mlp.child(2));
    act_->backward_weight(mlp.child(1));
    fc_->backward_weight(mlp.child(0));
    fc_->wait_input_gradient();
  }
  const Tensor d_h = ln2_->backward_input_residual(mlp_body.child(0), d_z, grad_output.reshape(d_z.shape()));
  const Tensor d_a = attn_->backward_input(attn_body.child(1), d_h, weights);
  if (weights) {
    ln2_->backward_weight(mlp_body.child(0));
    attn_->backward_weight(attn_body.child(1));
    attn_->wait_input_gradient();
  }
  Tensor grad_input = ln1_->backward_input_residual(attn_body.child(0), d_a, d_h);
  if (weights) {
    ln1_->backward_weight(attn_body.child(0));
    ctx.clear();
  }
  return grad_input;
}

void TransformerBlock::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  ln1_->split_for_tensor_parallel(group);
  attn_->split_for_tensor_parallel(group);
  ln2_->split_for_tensor_parallel(group);
  split_column_row_pair(*fc_, *proj_, group);
}

}  // namespace pf
