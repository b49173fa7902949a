#include "runtime/layers/layer_norm.h"

#include <cmath>

#include "runtime/core/error.h"
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

Tensor LayerNorm::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() >= 1 &&
                   input.dim(-1) == dim_,
               "layernorm '", name(), "': expected f32 input [..., ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
  if (is_cuda(input)) return forward_cuda(input, ctx);
  const int64_t rows = input.numel() / dim_;
  Tensor output = Tensor::empty(input.shape());
  Tensor xhat = Tensor::empty(input.shape());
  Tensor rstd = Tensor::empty({rows});
  const float* x = input.f32();
  const float* w = weight_.value.f32();
  const float* b = bias_.value.f32();
  float* y = output.f32();
  float* xh = xhat.f32();
  float* rs = rstd.f32();
  const float inv_dim = 1.0f / static_cast<float>(dim_);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim_;
    float* xhr = xh + r * dim_;
    float* yr = y + r * dim_;
    // Two passes (mean, then variance of the centred values) for accuracy.
    float sum = 0.0f;
    for (int64_t i = 0; i < dim_; ++i) sum += xr[i];
    const float mean = sum * inv_dim;
    float sq = 0.0f;
    for (int64_t i = 0; i < dim_; ++i) {
      const float c = xr[i] - mean;
      sq += c * c;
    }
    const float s = 1.0f / std::sqrt(sq * inv_dim + eps_);
    for (int64_t i = 0; i < dim_; ++i) {
      xhr[i] = (xr[i] - mean) * s;
      yr[i] = xhr[i] * w[i] + b[i];
    }
    rs[r] = s;
  }
  ctx.save("xhat", xhat);
  ctx.child(0).save("rstd", rstd);
  return output;
}

Tensor LayerNorm::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  if (ctx.has("input")) return backward_input_cuda(ctx, grad_output);
  const Tensor& xhat = ctx.get("xhat");
  const Tensor& rstd = ctx.child(0).get("rstd");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == xhat.shape(),
               "layernorm '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(xhat.shape()));
  const int64_t rows = xhat.numel() / dim_;
  Tensor grad_input = Tensor::empty(xhat.shape());
  const float* xh = xhat.f32();
  const float* rs = rstd.f32();
  const float* dy = grad_output.f32();
  const float* w = weight_.value.f32();
  float* dx = grad_input.f32();
  const float inv_dim = 1.0f / static_cast<float>(dim_);
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * weight.
  for (int64_t r = 0; r < rows; ++r) {
    const float* xhr = xh + r * dim_;
    const float* dyr = dy + r * dim_;
    float* dxr = dx + r * dim_;
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int64_t i = 0; i < dim_; ++i) {
      const float d = dyr[i] * w[i];
      sum_dxhat += d;
      sum_dxhat_xhat += d * xhr[i];
    }
    const float mean_d = sum_dxhat * inv_dim;
    const float mean_dx = sum_dxhat_xhat * inv_dim;
    for (int64_t i = 0; i < dim_; ++i) dxr[i] = rs[r] * (dyr[i] * w[i] - mean_d - xhr[i] * mean_dx);
  }
  ctx.child(0).clear();  // rstd: backward_weight needs only xhat and the output gradient
  ctx.save("grad_output", grad_output);
  return grad_input;
}

void LayerNorm::backward_weight(SavedContext& ctx) {
  if (ctx.has("input")) {
    cuda_backend().layer_norm_backward_weight(ctx.get("input"), ctx.get("mean"), ctx.get("rstd"), ctx.get("grad_output"),
                                    weight_.grad, bias_.grad);
    ctx.clear();
    return;
  }
  const Tensor& xhat = ctx.get("xhat");
  const Tensor& grad_output = ctx.get("grad_output");
  const int64_t rows = xhat.numel() / dim_;
  const float* xh = xhat.f32();
  const float* dy = grad_output.f32();
  float* dw = weight_.grad.f32();
  float* db = bias_.grad.f32();
  // Row order, so the sum order is fixed.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < dim_; ++i) {
      dw[i] += dy[r * dim_ + i] * xh[r * dim_ + i];
      db[i] += dy[r * dim_ + i];
    }
  }
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
