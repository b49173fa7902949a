#include "runtime/layers/transformer_block.h"

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"

namespace pf {

namespace {

std::unique_ptr<Layer> sequential(const std::string& name, std::vector<std::unique_ptr<Layer>> layers) {
  return std::make_unique<Sequential>(name, std::move(layers));
}

template <typename... Layers>
std::vector<std::unique_ptr<Layer>> list(std::unique_ptr<Layers>... layers) {
  std::vector<std::unique_ptr<Layer>> out;
  (out.push_back(std::move(layers)), ...);
  return out;
}

}  // namespace

TransformerBlock::TransformerBlock(std::string name, int64_t dim, int64_t heads, int64_t mlp_hidden)
    : Layer(std::move(name)), dim_(dim), heads_(heads), mlp_hidden_(mlp_hidden) {
  PF_CHECK_ARG(dim_ > 0 && heads_ > 0 && mlp_hidden_ > 0 && dim_ % heads_ == 0, "transformer_block '",
               this->name(), "': dim, heads and mlp_hidden must be > 0 with dim divisible by heads, got dim ",
               dim_, ", heads ", heads_, " and mlp_hidden ", mlp_hidden_);
  const std::string& n = this->name();
  const std::string attn_residual = join_name(n, "attn_residual");
  const std::string mlp_residual = join_name(n, "mlp_residual");
  const std::string mlp = join_name(n, "mlp");
  auto attn_body = sequential(
      join_name(attn_residual, "body"),
      list(std::make_unique<LayerNorm>(join_name(n, "ln1"), dim_),
           std::make_unique<CausalSelfAttention>(join_name(n, "attn"), dim_, heads_)));
  auto mlp_body = sequential(
      join_name(mlp_residual, "body"),
      list(std::make_unique<LayerNorm>(join_name(n, "ln2"), dim_),
           sequential(mlp, list(std::make_unique<Linear>(join_name(mlp, "fc"), dim_, mlp_hidden_),
                                std::make_unique<GELU>(join_name(mlp, "act")),
                                std::make_unique<Linear>(join_name(mlp, "proj"), mlp_hidden_, dim_)))));
  body_ = std::make_unique<Sequential>(
      n, list(std::make_unique<Residual>(attn_residual, std::move(attn_body)),
              std::make_unique<Residual>(mlp_residual, std::move(mlp_body))));
}

nlohmann::json TransformerBlock::config() const {
  return {{"type", type()}, {"name", name()}, {"dim", dim_}, {"heads", heads_}, {"mlp_hidden", mlp_hidden_}};
}

std::vector<Parameter*> TransformerBlock::parameters() { return body_->parameters(); }

Tensor TransformerBlock::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 3 &&
                   input.dim(2) == dim_,
               "transformer_block '", name(), "': expected f32 input [B, T, ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  return body_->forward(input, ctx);
}

Tensor TransformerBlock::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return body_->backward_input(ctx, grad_output);
}

void TransformerBlock::backward_weight(SavedContext& ctx) { body_->backward_weight(ctx); }

}  // namespace pf
