#include "runtime/layers/activations.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/layers/cuda_dispatch.h"

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

// Elementwise y = f(x), saving x, by `loop(n, x, y)`; dx = dy * f'(x) by `grad_loop(n, x, dy, dx)`.
// On a CUDA input, the CUDA backend's `gpu_fn(x)` / `gpu_grad(x, dy)` run instead of the loops.
template <typename Loop>
Tensor pointwise_forward(const Layer& layer, const Tensor& input, SavedContext& ctx, Loop loop,
                         Tensor (CudaBackend::*gpu_fn)(const Tensor&)) {
  check_input(layer, input);
  if (is_cuda(input)) {
    Tensor output = (cuda_backend().*gpu_fn)(input);
    ctx.save("input", input);
    return output;
  }
  Tensor output = Tensor::empty(input.shape());
  loop(input.numel(), input.f32(), output.f32());
  ctx.save("input", input);
  return output;
}

template <typename GradLoop>
Tensor pointwise_backward(const Layer& layer, SavedContext& ctx, const Tensor& grad_output, GradLoop grad_loop,
                          Tensor (CudaBackend::*gpu_grad)(const Tensor&, const Tensor&)) {
  const Tensor input = ctx.get("input");
  check_grad_output(layer, input, grad_output);
  check_same_device(layer.type(), layer.name(), "output gradient", grad_output.device(), "the forward input",
                    input.device());
  if (is_cuda(input)) {
    Tensor grad_input = (cuda_backend().*gpu_grad)(input, grad_output);
    ctx.clear();
    return grad_input;
  }
  Tensor grad_input = Tensor::empty(input.shape());
  grad_loop(input.numel(), input.f32(), grad_output.f32(), grad_input.f32());
  ctx.clear();  // nothing left for backward_weight
  return grad_input;
}

// ReLU's loops: plain, so the compiler vectorises them. Written as "not <= 0" so that NaN passes
// through as in PyTorch (x > 0 mapped it to 0, hiding a NaN from the loss); every other value,
// -0 included, gives the bits it gave before.
void relu_forward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = !(x[i] <= 0.0f) ? x[i] : 0.0f;
}

void relu_backward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = !(x[i] <= 0.0f) ? dy[i] : 0.0f;
}

}  // namespace

ReLU::ReLU(std::string name) : Layer(std::move(name)) {}

nlohmann::json ReLU::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor ReLU::forward(const Tensor& input, SavedContext& ctx) {
  return pointwise_forward(*this, input, ctx, relu_forward, &CudaBackend::relu_forward);
}

Tensor ReLU::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return pointwise_backward(*this, ctx, grad_output, relu_backward, &CudaBackend::relu_backward);
}

GELU::GELU(std::string name) : Layer(std::move(name)) {}

nlohmann::json GELU::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor GELU::forward(const Tensor& input, SavedContext& ctx) {
  return pointwise_forward(*this, input, ctx, cpu::gelu_forward, &CudaBackend::gelu_forward);
}

Tensor GELU::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return pointwise_backward(*this, ctx, grad_output, cpu::gelu_backward, &CudaBackend::gelu_backward);
}

Tensor GELU::backward_input_column_sums(SavedContext& ctx, const Tensor& grad_output, Tensor* column_sums) {
  const Tensor input = ctx.get("input");
  check_grad_output(*this, input, grad_output);
  PF_INTERNAL_CHECK(!is_cuda(input) && !is_cuda(grad_output), "gelu '", name(),
                    "': the fused bias gradient runs on CPU tensors only");
  const int64_t cols = input.rank() == 0 ? 1 : input.dim(-1);
  Tensor grad_input = Tensor::empty(input.shape());
  *column_sums = Tensor::empty({cols});
  cpu::gelu_backward_column_sums(cols == 0 ? 0 : input.numel() / cols, cols, input.f32(), grad_output.f32(),
                                 grad_input.f32(), column_sums->f32());
  ctx.clear();  // nothing left for backward_weight
  return grad_input;
}

SwiGLU::SwiGLU(std::string name) : Layer(std::move(name)) {}

nlohmann::json SwiGLU::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor SwiGLU::forward(const Tensor& input, SavedContext& ctx) {
  check_input(*this, input);
  PF_CHECK_ARG(input.rank() >= 1 && input.dim(-1) % 2 == 0 && input.dim(-1) > 0, "swiglu '", name(),
               "': the input's last dimension must be even (gate half, up half), got ",
               shape_to_string(input.shape()));
  if (is_cuda(input)) {
    Tensor output = cuda_backend().swiglu_forward(input);
    ctx.save("input", input);
    return output;
  }
  const int64_t width = input.dim(-1), half = width / 2, rows = input.numel() / width;
  Shape shape = input.shape();
  shape.back() = half;
  Tensor output = Tensor::empty(shape);
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = input.f32() + r * width;
    const float* u = a + half;
    float* y = output.f32() + r * half;
    for (int64_t i = 0; i < half; ++i) y[i] = a[i] / (1.0f + cpu::fast_exp(-a[i])) * u[i];
  }
  ctx.save("input", input);
  return output;
}

Tensor SwiGLU::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor input = ctx.get("input");
  const int64_t width = input.dim(-1), half = width / 2, rows = input.numel() / width;
  Shape shape = input.shape();
  shape.back() = half;
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == shape,
               "swiglu '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(shape));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward input", input.device());
  if (is_cuda(input)) {
    Tensor grad_input = cuda_backend().swiglu_backward(input, grad_output);
    ctx.clear();
    return grad_input;
  }
  Tensor grad_input = Tensor::empty(input.shape());
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = input.f32() + r * width;
    const float* u = a + half;
    const float* dy = grad_output.f32() + r * half;
    float* da = grad_input.f32() + r * width;
    float* du = da + half;
    for (int64_t i = 0; i < half; ++i) {
      const float s = 1.0f / (1.0f + cpu::fast_exp(-a[i]));
      da[i] = dy[i] * u[i] * s * (1.0f + a[i] * (1.0f - s));
      du[i] = dy[i] * a[i] * s;
    }
  }
  ctx.clear();  // nothing left for backward_weight
  return grad_input;
}

}  // namespace pf
