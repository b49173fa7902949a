#include "runtime/layers/group_norm.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

GroupNorm::GroupNorm(std::string name, int64_t channels, int64_t groups, float eps)
    : Layer(std::move(name)), channels_(channels), groups_(groups), eps_(eps) {
  PF_CHECK_ARG(channels_ > 0 && groups_ > 0 && channels_ % groups_ == 0, "groupnorm '", this->name(),
               "': groups must divide channels, got ", channels_, " channels and ", groups_, " groups");
  PF_CHECK_ARG(std::isfinite(eps_) && eps_ > 0.0f, "groupnorm '", this->name(), "': eps must be finite and > 0, got ",
               eps_);
  weight_ = make_parameter(join_name(this->name(), "weight"), {channels_}, InitSpec::ones());
  bias_ = make_parameter(join_name(this->name(), "bias"), {channels_}, InitSpec::zeros());
}

nlohmann::json GroupNorm::config() const {
  return {{"type", type()}, {"name", name()}, {"channels", channels_}, {"groups", groups_}, {"eps", eps_}};
}

std::vector<Parameter*> GroupNorm::parameters() { return {&weight_, &bias_}; }

Tensor GroupNorm::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() >= 2 && input.dim(1) == channels_,
               "groupnorm '", name(), "': expected f32 input [B, ", channels_, ", ...], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ", shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
  if (is_cuda(input)) {  // the same context, from the CUDA backend's kernels
    Tensor output, xhat, rstd;
    cuda_backend().group_norm_forward(input, weight_.value, bias_.value, groups_, eps_, &output, &xhat, &rstd);
    ctx.save("xhat", xhat);
    ctx.child(0).save("rstd", rstd);
    return output;
  }
  const int64_t batch = input.dim(0), spatial = input.numel() / (batch * channels_);
  const int64_t per_group = channels_ / groups_, count = per_group * spatial;
  Tensor output = Tensor::empty(input.shape());
  Tensor xhat = Tensor::empty(input.shape());
  Tensor rstd = Tensor::empty({batch, groups_});
  const float* w = weight_.value.f32();
  const float* bias = bias_.value.f32();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t grp = 0; grp < groups_; ++grp) {
      const int64_t offset = (b * channels_ + grp * per_group) * spatial;
      const float* x = input.f32() + offset;
      float sum = 0.0f;
      for (int64_t i = 0; i < count; ++i) sum += x[i];
      const float mean = sum / static_cast<float>(count);
      float squares = 0.0f;
      for (int64_t i = 0; i < count; ++i) squares += (x[i] - mean) * (x[i] - mean);
      const float s = 1.0f / std::sqrt(squares / static_cast<float>(count) + eps_);
      rstd.f32()[b * groups_ + grp] = s;
      float* xh = xhat.f32() + offset;
      float* y = output.f32() + offset;
      for (int64_t c = 0; c < per_group; ++c) {
        const int64_t channel = grp * per_group + c;
        for (int64_t i = c * spatial; i < (c + 1) * spatial; ++i) {
          xh[i] = (x[i] - mean) * s;
          y[i] = xh[i] * w[channel] + bias[channel];
        }
      }
    }
  }
  ctx.save("xhat", xhat);
  ctx.child(0).save("rstd", rstd);
  return output;
}

Tensor GroupNorm::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& xhat = ctx.get("xhat");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == xhat.shape(),
               "groupnorm '", name(), "': output gradient ",
               grad_output.defined() ? shape_to_string(grad_output.shape()) : "undefined",
               " does not match the forward output ", shape_to_string(xhat.shape()));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward activations",
                    xhat.device());
  const Tensor& rstd = ctx.child(0).get("rstd");
  Tensor grad_input = is_cuda(xhat)
                          ? cuda_backend().group_norm_backward_input(xhat, rstd, weight_.value, groups_, grad_output)
                          : backward_input_cpu(xhat, rstd, grad_output);
  ctx.child(0).clear();  // rstd: backward_weight needs only xhat and the output gradient
  ctx.save("grad_output", grad_output);
  return grad_input;
}

Tensor GroupNorm::backward_input_cpu(const Tensor& xhat, const Tensor& rstd, const Tensor& grad_output) const {
  const int64_t batch = xhat.dim(0), spatial = xhat.numel() / (batch * channels_);
  const int64_t per_group = channels_ / groups_, count = per_group * spatial;
  Tensor grad_input = Tensor::empty(xhat.shape());
  const float* w = weight_.value.f32();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t grp = 0; grp < groups_; ++grp) {
      const int64_t offset = (b * channels_ + grp * per_group) * spatial;
      const float* xh = xhat.f32() + offset;
      const float* dy = grad_output.f32() + offset;
      float* dx = grad_input.f32() + offset;
      float sum_g = 0.0f, sum_gx = 0.0f;  // sums of g = dy w and of g xhat over the group
      for (int64_t c = 0; c < per_group; ++c) {
        const float wc = w[grp * per_group + c];
        for (int64_t i = c * spatial; i < (c + 1) * spatial; ++i) {
          const float gi = dy[i] * wc;
          sum_g += gi;
          sum_gx += gi * xh[i];
        }
      }
      const float mean_g = sum_g / static_cast<float>(count), mean_gx = sum_gx / static_cast<float>(count);
      const float s = rstd.f32()[b * groups_ + grp];
      for (int64_t c = 0; c < per_group; ++c) {
        const float wc = w[grp * per_group + c];
        for (int64_t i = c * spatial; i < (c + 1) * spatial; ++i) {
          dx[i] = s * (dy[i] * wc - mean_g - xh[i] * mean_gx);
        }
      }
    }
  }
  return grad_input;
}

void GroupNorm::backward_weight(SavedContext& ctx) {
  const Tensor& xhat = ctx.get("xhat");
  const Tensor& dy = ctx.get("grad_output");
  if (is_cuda(xhat)) {
    cuda_backend().group_norm_backward_weight(xhat, dy, weight_.grad, bias_.grad);
    ctx.clear();
    return;
  }
  const int64_t batch = xhat.dim(0), spatial = xhat.numel() / (batch * channels_);
  float* dw = weight_.grad.f32();
  float* db = bias_.grad.f32();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < channels_; ++c) {
      const int64_t offset = (b * channels_ + c) * spatial;
      const float* xh = xhat.f32() + offset;
      const float* g = dy.f32() + offset;
      float w_sum = 0.0f, b_sum = 0.0f;
      for (int64_t i = 0; i < spatial; ++i) {
        w_sum += g[i] * xh[i];
        b_sum += g[i];
      }
      dw[c] += w_sum;
      db[c] += b_sum;
    }
  }
  ctx.clear();
}

}  // namespace pf
