#include "runtime/layers/layer_norm.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/layer_norm.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

LayerNorm::LayerNorm(std::string name, int64_t dim, float eps)
    : Layer(std::move(name)), dim_(dim), eps_(eps) {
  PF_CHECK_ARG(dim_ > 0, "layernorm '", this->name(), "': dim must be > 0, got ", dim_);
  PF_CHECK_ARG(std::isfinite(eps_) && eps_ > 0.0f, "layernorm '", this->name(),
               "': eps must be finite and > 0, got ", eps_);
  weight_ = make_parameter(join_name(this->name(), "weight"), {dim_}, InitSpec::ones());
  bias_ = make_parameter(join_name(this->name(), "bias"), {dim_}, InitSpec::zeros());
}

nlohmann::json LayerNorm::config() const {
  return {{"type", type()}, {"name", name()}, {"dim", dim_}, {"eps", eps_}};
}

std::vector<Parameter*> LayerNorm::parameters() { return {&weight_, &bias_}; }

void LayerNorm::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  PF_CHECK_ARG(group != nullptr, "layernorm '", name(), "': the tensor-parallel group is null");
  if (group->sequence_parallel()) sequence_group_ = group;
}

void LayerNorm::check_input(const Tensor& input) const {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() >= 1 &&
                   input.dim(-1) == dim_,
               "layernorm '", name(), "': expected f32 input [..., ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
}

Tensor LayerNorm::forward(const Tensor& input, SavedContext& ctx) {
  check_input(input);
  if (is_cuda(input)) return forward_cuda(input, ctx);
  return forward_cpu(input, nullptr, nullptr, ctx);
}

Tensor LayerNorm::forward_residual(const Tensor& input, const Tensor& skip, SavedContext& ctx, Tensor* sum) {
  check_input(input);
  PF_CHECK_ARG(skip.defined() && skip.dtype() == DType::kF32 && skip.shape() == input.shape(), "layernorm '",
               name(), "': residual ", skip.defined() ? shape_to_string(skip.shape()) : "undefined",
               " does not match the input ", shape_to_string(input.shape()));
  PF_INTERNAL_CHECK(!is_cuda(input) && !is_cuda(skip), "layernorm '", name(),
           "': the folded residual runs on CPU tensors only");
  return forward_cpu(input, &skip, sum, ctx);
}

Tensor LayerNorm::forward_cpu(const Tensor& input, const Tensor* skip, Tensor* sum, SavedContext& ctx) {
  const int64_t rows = input.numel() / dim_;
  Tensor output = Tensor::empty(input.shape());
  Tensor xhat = Tensor::empty(input.shape());
  Tensor rstd = Tensor::empty({rows});
  if (skip != nullptr) *sum = Tensor::empty(input.shape());
  cpu::layer_norm_forward(rows, dim_, input.f32(), skip ? skip->f32() : nullptr, skip ? sum->f32() : nullptr,
                          weight_.value.f32(), bias_.value.f32(), eps_, output.f32(), xhat.f32(), rstd.f32());
  ctx.save("xhat", xhat);
  ctx.child(0).save("rstd", rstd);
  return output;
}

Tensor LayerNorm::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  if (ctx.has("input")) return backward_input_cuda(ctx, grad_output);
  return backward_input_cpu(ctx, grad_output, nullptr);
}

Tensor LayerNorm::backward_input_residual(SavedContext& ctx, const Tensor& grad_output, const Tensor& skip_grad) {
  PF_INTERNAL_CHECK(!ctx.has("input") && !is_cuda(skip_grad), "layernorm '", name(),
           "': the folded residual runs on CPU tensors only");
  PF_CHECK_ARG(skip_grad.defined() && skip_grad.dtype() == DType::kF32 &&
                   skip_grad.shape() == grad_output.shape(),
               "layernorm '", name(), "': residual gradient ",
               skip_grad.defined() ? shape_to_string(skip_grad.shape()) : "undefined",
               " does not match the output gradient ", shape_to_string(grad_output.shape()));
  return backward_input_cpu(ctx, grad_output, &skip_grad);
}

Tensor LayerNorm::backward_input_cpu(SavedContext& ctx, const Tensor& grad_output, const Tensor* skip_grad) {
  const Tensor& xhat = ctx.get("xhat");
  const Tensor& rstd = ctx.child(0).get("rstd");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == xhat.shape(),
               "layernorm '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(xhat.shape()));
  const int64_t rows = xhat.numel() / dim_;
  Tensor grad_input = Tensor::empty(xhat.shape());
  cpu::layer_norm_backward_input(rows, dim_, xhat.f32(), rstd.f32(), weight_.value.f32(), grad_output.f32(),
                                 skip_grad ? skip_grad->f32() : nullptr, grad_input.f32());
  ctx.child(0).clear();  // rstd: backward_weight needs only xhat and the output gradient
  ctx.save("grad_output", grad_output);
  return grad_input;
}

void LayerNorm::backward_weight(SavedContext& ctx) {
  const bool on_device = ctx.has("input");  // the CUDA context (forward_cuda)
  accumulate_over_sequence(
      sequence_group_.get(), {&weight_, &bias_},
      [&](const std::vector<Tensor>& grads) {
        if (on_device) {
          cuda_backend().layer_norm_backward_weight(ctx.get("input"), ctx.get("mean"), ctx.get("rstd"),
                                                    ctx.get("grad_output"), grads[0], grads[1]);
          return;
        }
        const Tensor& xhat = ctx.get("xhat");
        cpu::layer_norm_backward_weight(xhat.numel() / dim_, dim_, xhat.f32(), ctx.get("grad_output").f32(),
                                        grads[0].f32(), grads[1].f32());
      },
      "layernorm '" + name() + "' weight gradients");
  ctx.clear();
}

// CUDA: the kernels save the input and the per-row mean and rstd (not xhat) and recompute xhat in B
// and W, so all three stay in the context until W.
Tensor LayerNorm::forward_cuda(const Tensor& input, SavedContext& ctx) {
  Tensor output, mean, rstd;
  cuda_backend().layer_norm_forward(input, weight_.value, bias_.value, eps_, &output, &mean, &rstd);
  ctx.save("input", input);
  ctx.save("mean", mean);
  ctx.save("rstd", rstd);
  return output;
}

Tensor LayerNorm::backward_input_cuda(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& input = ctx.get("input");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == input.shape(),
               "layernorm '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(input.shape()));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward input",
                    input.device());
  Tensor grad_input =
      cuda_backend().layer_norm_backward_input(input, ctx.get("mean"), ctx.get("rstd"), weight_.value, grad_output);
  ctx.save("grad_output", grad_output);
  return grad_input;
}

}  // namespace pf
