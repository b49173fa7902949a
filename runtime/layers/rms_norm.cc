#include "runtime/layers/rms_norm.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

RMSNorm::RMSNorm(std::string name, int64_t dim, float eps) : Layer(std::move(name)), dim_(dim), eps_(eps) {
  PF_CHECK_ARG(dim_ > 0, "rmsnorm '", this->name(), "': dim must be > 0, got ", dim_);
  PF_CHECK_ARG(std::isfinite(eps_) && eps_ > 0.0f, "rmsnorm '", this->name(), "': eps must be finite and > 0, got ",
               eps_);
  weight_ = make_parameter(join_name(this->name(), "weight"), {dim_}, InitSpec::ones());
}

nlohmann::json RMSNorm::config() const { return {{"type", type()}, {"name", name()}, {"dim", dim_}, {"eps", eps_}}; }

void RMSNorm::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  PF_CHECK_ARG(group != nullptr, "rmsnorm '", name(), "': the tensor-parallel group is null");
  if (group->sequence_parallel()) sequence_group_ = group;
}

std::vector<Parameter*> RMSNorm::parameters() { return {&weight_}; }

Tensor RMSNorm::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() >= 1 && input.dim(-1) == dim_,
               "rmsnorm '", name(), "': expected f32 input [..., ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ", shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
  if (is_cuda(input)) {  // the same context, from the CUDA backend's kernels
    Tensor output, xhat, rstd;
    cuda_backend().rms_norm_forward(input, weight_.value, eps_, &output, &xhat, &rstd);
    ctx.save("xhat", xhat);
    ctx.child(0).save("rstd", rstd);
    return output;
  }
  const int64_t rows = input.numel() / dim_;
  Tensor output = Tensor::empty(input.shape());
  Tensor xhat = Tensor::empty(input.shape());
  Tensor rstd = Tensor::empty({rows});
  const float* w = weight_.value.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = input.f32() + r * dim_;
    float* xh = xhat.f32() + r * dim_;
    float* y = output.f32() + r * dim_;
    float squares = 0.0f;
    for (int64_t i = 0; i < dim_; ++i) squares += x[i] * x[i];
    const float s = 1.0f / std::sqrt(squares / static_cast<float>(dim_) + eps_);
    for (int64_t i = 0; i < dim_; ++i) {
      xh[i] = x[i] * s;
      y[i] = w[i] * xh[i];
    }
    rstd.f32()[r] = s;
  }
  ctx.save("xhat", xhat);
  ctx.child(0).save("rstd", rstd);
  return output;
}

Tensor RMSNorm::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& xhat = ctx.get("xhat");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == xhat.shape(),
               "rmsnorm '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(xhat.shape()));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward activations",
                    xhat.device());
  const Tensor& rstd = ctx.child(0).get("rstd");
  Tensor grad_input = is_cuda(xhat) ? cuda_backend().rms_norm_backward_input(xhat, rstd, weight_.value, grad_output)
                                    : backward_input_cpu(xhat, rstd, grad_output);
  ctx.child(0).clear();  // rstd: backward_weight needs only xhat and the output gradient
  ctx.save("grad_output", grad_output);
  return grad_input;
}

Tensor RMSNorm::backward_input_cpu(const Tensor& xhat, const Tensor& rstd, const Tensor& grad_output) const {
  const int64_t rows = xhat.numel() / dim_;
  Tensor grad_input = Tensor::empty(xhat.shape());
  const float* w = weight_.value.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xh = xhat.f32() + r * dim_;
    const float* dy = grad_output.f32() + r * dim_;
    float* dx = grad_input.f32() + r * dim_;
    float dot = 0.0f;  // sum of dy o w o xhat
    for (int64_t i = 0; i < dim_; ++i) dot += dy[i] * w[i] * xh[i];
    const float mean_dot = dot / static_cast<float>(dim_), s = rstd.f32()[r];
    for (int64_t i = 0; i < dim_; ++i) dx[i] = s * (dy[i] * w[i] - xh[i] * mean_dot);
  }
  return grad_input;
}

void RMSNorm::backward_weight(SavedContext& ctx) {
  const Tensor& xhat = ctx.get("xhat");
  const Tensor& dy = ctx.get("grad_output");
  const int64_t rows = xhat.numel() / dim_;
  accumulate_over_sequence(
      sequence_group_.get(), {&weight_},
      [&](const std::vector<Tensor>& grads) {
        if (is_cuda(xhat)) {
          cuda_backend().rms_norm_backward_weight(xhat, dy, grads[0]);
          return;
        }
        float* dw = grads[0].f32();
        for (int64_t r = 0; r < rows; ++r) {
          const float* xh = xhat.f32() + r * dim_;
          const float* g = dy.f32() + r * dim_;
          for (int64_t i = 0; i < dim_; ++i) dw[i] += g[i] * xh[i];
        }
      },
      "rmsnorm '" + name() + "' weight gradient");
  ctx.clear();
}

}  // namespace pf
