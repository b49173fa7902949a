#include "runtime/layers/activations.h"

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/fast_math.h"

namespace pf {

namespace {

void check_input(const Layer& layer, const Tensor& input) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32, layer.type(), " '", layer.name(),
               "': expected an f32 input, got ",
               input.defined() ? dtype_name(input.dtype()) : "an undefined tensor", " ",
               shape_to_string(input.shape()));
}

void check_grad_output(const Layer& layer, const Tensor& input, const Tensor& grad_output) {
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == input.shape(),
               layer.type(), " '", layer.name(), "': output gradient ",
               shape_to_string(grad_output.shape()), " does not match the forward output ",
               shape_to_string(input.shape()));
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

}  // namespace

ReLU::ReLU(std::string name) : Layer(std::move(name)) {}

nlohmann::json ReLU::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor ReLU::forward(const Tensor& input, SavedContext& ctx) {
  check_input(*this, input);
  Tensor output = Tensor::empty(input.shape());
  const float* x = input.f32();
  float* y = output.f32();
  for (int64_t i = 0, n = input.numel(); i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  ctx.save("input", input);
  return output;
}

Tensor ReLU::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor input = ctx.get("input");
  check_grad_output(*this, input, grad_output);
  Tensor grad_input = Tensor::empty(input.shape());
  const float* x = input.f32();
  const float* dy = grad_output.f32();
  float* dx = grad_input.f32();
  for (int64_t i = 0, n = input.numel(); i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  ctx.clear();  // nothing left for backward_weight
  return grad_input;
}

GELU::GELU(std::string name) : Layer(std::move(name)) {}

nlohmann::json GELU::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor GELU::forward(const Tensor& input, SavedContext& ctx) {
  check_input(*this, input);
  Tensor output = Tensor::empty(input.shape());
  const float* x = input.f32();
  float* y = output.f32();
  for (int64_t i = 0, n = input.numel(); i < n; ++i) {
    const float v = x[i];
    const float t = cpu::fast_tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
  ctx.save("input", input);
  return output;
}

Tensor GELU::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor input = ctx.get("input");
  check_grad_output(*this, input, grad_output);
  Tensor grad_input = Tensor::empty(input.shape());
  const float* x = input.f32();
  const float* dy = grad_output.f32();
  float* dx = grad_input.f32();
  for (int64_t i = 0, n = input.numel(); i < n; ++i) {
    const float v = x[i];
    const float t = cpu::fast_tanh(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
    const float dt = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dt);
  }
  ctx.clear();  // nothing left for backward_weight
  return grad_input;
}

}  // namespace pf
