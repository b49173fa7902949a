#include "runtime/layers/residual.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"
#include "runtime/layers/sequential.h"

namespace pf {

namespace {

nlohmann::json sub_layers(const Layer& layer) {
  nlohmann::json children = nlohmann::json::array();
  if (const auto* sequential = dynamic_cast<const Sequential*>(&layer)) {
    for (const auto& l : sequential->layers()) children.push_back(l->config());
  } else {
    children.push_back(layer.config());
  }
  return children;
}

}  // namespace

Residual::Residual(std::string name, std::unique_ptr<Layer> body, std::unique_ptr<Layer> shortcut)
    : Layer(std::move(name)), body_(std::move(body)), shortcut_(std::move(shortcut)) {
  PF_CHECK_ARG(body_ != nullptr, "residual '", this->name(), "': body must not be null");
}

nlohmann::json Residual::config() const {
  nlohmann::json j = {{"type", type()}, {"name", name()}, {"layers", sub_layers(*body_)}};
  if (shortcut_) j["shortcut"] = sub_layers(*shortcut_);
  return j;
}

std::vector<Parameter*> Residual::parameters() {
  std::vector<Parameter*> all = body_->parameters();
  if (shortcut_) {
    for (Parameter* p : shortcut_->parameters()) all.push_back(p);
  }
  return all;
}

Tensor Residual::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32, "residual '", name(),
               "': expected an f32 input, got ", input.defined() ? dtype_name(input.dtype()) : "undefined",
               " ", shape_to_string(input.shape()));
  Tensor body_output = body_->forward(input, ctx.child(0));
  // The skip path: the input itself, or the shortcut's output.
  const Tensor skip = shortcut_ ? shortcut_->forward(input, ctx.child(1)) : input;
  PF_CHECK_ARG(body_output.defined() && body_output.dtype() == DType::kF32 && skip.defined() &&
                   skip.dtype() == DType::kF32 && body_output.shape() == skip.shape(),
               "residual '", name(), "': body output ", shape_to_string(body_output.shape()), " does not match the ",
               shortcut_ ? "shortcut output " : "input ", skip.defined() ? shape_to_string(skip.shape()) : "undefined");
  check_same_device(type(), name(), "body output", body_output.device(), "input", input.device());
  ctx.set_int("numel", input.numel());
  ctx.set_int("output_numel", body_output.numel());
  if (is_cuda(input)) return cuda_backend().add(skip, body_output);
  Tensor output = Tensor::empty(body_output.shape());
  const float* x = skip.f32();
  const float* fx = body_output.f32();
  float* y = output.f32();
  for (int64_t i = 0, n = output.numel(); i < n; ++i) y[i] = x[i] + fx[i];
  return output;
}

Tensor Residual::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const int64_t numel = ctx.get_int("numel"), output_numel = ctx.get_int("output_numel");
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.numel() == output_numel,
               "residual '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output (", output_numel, " elements)");
  Tensor body_grad = body_->backward_input(ctx.child(0), grad_output);
  // The skip path's input gradient: the output gradient itself, or the shortcut's.
  const Tensor skip_grad = shortcut_ ? shortcut_->backward_input(ctx.child(1), grad_output) : grad_output;
  PF_CHECK_ARG(body_grad.defined() && body_grad.dtype() == DType::kF32 && body_grad.numel() == numel &&
                   skip_grad.defined() && skip_grad.dtype() == DType::kF32 && skip_grad.numel() == numel,
               "residual '", name(), "': body input gradient ", shape_to_string(body_grad.shape()),
               " does not match the ", shortcut_ ? "shortcut input gradient " : "output gradient ",
               skip_grad.defined() ? shape_to_string(skip_grad.shape()) : "undefined");
  check_same_device(type(), name(), "output gradient", grad_output.device(), "body input gradient",
                    body_grad.device());
  if (is_cuda(grad_output)) return cuda_backend().add(skip_grad, body_grad).reshape(body_grad.shape());
  Tensor grad_input = Tensor::empty(body_grad.shape());
  const float* dy = skip_grad.f32();
  const float* db = body_grad.f32();
  float* dx = grad_input.f32();
  for (int64_t i = 0; i < numel; ++i) dx[i] = dy[i] + db[i];
  return grad_input;
}

void Residual::backward_weight(SavedContext& ctx) {
  body_->backward_weight(ctx.child(0));
  if (shortcut_) shortcut_->backward_weight(ctx.child(1));
  ctx.clear();
}

}  // namespace pf
