// Element-wise activations. Parameter-free: the backward_input releases the whole context.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

// y = max(x, 0); the gradient passes where x > 0.
class ReLU : public Layer {
 public:
  explicit ReLU(std::string name);
  const char* type() const override { return "relu"; }
  bool elementwise() const override { return true; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

// GPT-2's tanh approximation: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), on the CPU
// runtime/kernels/cpu/gelu.h.
class GELU : public Layer {
 public:
  explicit GELU(std::string name);
  const char* type() const override { return "gelu"; }
  bool elementwise() const override { return true; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  // backward_input, plus *column_sums = the input gradient summed over all but the last dimension
  // ([last dim], in row order) in the same pass: the bias gradient of a Linear before this GELU
  // (Linear::backward_input_bias_grad). CPU tensors only.
  Tensor backward_input_column_sums(SavedContext& ctx, const Tensor& grad_output, Tensor* column_sums);
};

// Llama's gated MLP activation: the input's last dimension holds a gate half and an up half,
// x = [a | u] of width 2 H, and y = silu(a) o u of width H, silu(a) = a / (1 + exp(-a)) (so a Linear
// to 2 H before it is Llama's gate_proj and up_proj in one GEMM). Saves the input; on CUDA tensors
// the CUDA backend's kernel (element_ops.h's swiglu_*, the same formulas).
//   da = dy o u o s (1 + a (1 - s)), s = sigmoid(a)       du = dy o silu(a)
class SwiGLU : public Layer {
 public:
  explicit SwiGLU(std::string name);
  const char* type() const override { return "swiglu"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

}  // namespace pf
