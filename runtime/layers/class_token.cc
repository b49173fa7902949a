#include "runtime/layers/class_token.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

nlohmann::json ClassToken::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor ClassToken::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 3 && input.dim(1) >= 1,
               "class_token '", name(), "': expected f32 tokens [B, T, D] with T >= 1, got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ", shape_to_string(input.shape()));
  const int64_t batch = input.dim(0), steps = input.dim(1), dim = input.dim(2);
  Tensor output;
  if (is_cuda(input)) {
    output = cuda_backend().class_token_forward(input);
  } else {
    output = Tensor::empty({batch, dim});
    for (int64_t b = 0; b < batch; ++b)
      std::memcpy(output.f32() + b * dim, input.f32() + b * steps * dim, sizeof(float) * dim);
  }
  ctx.set_int("batch", batch);
  ctx.set_int("steps", steps);
  ctx.set_int("dim", dim);
  return output;
}

Tensor ClassToken::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const int64_t batch = ctx.get_int("batch"), steps = ctx.get_int("steps"), dim = ctx.get_int("dim");
  const Shape expected = {batch, dim};
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == expected,
               "class_token '", name(), "': output gradient ",
               grad_output.defined() ? shape_to_string(grad_output.shape()) : "undefined",
               " does not match the forward output ", shape_to_string(expected));
  if (is_cuda(grad_output)) {
    ctx.clear();
    return cuda_backend().class_token_backward(grad_output, steps);
  }
  Tensor grad_input = Tensor::zeros({batch, steps, dim});
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(grad_input.f32() + b * steps * dim, grad_output.f32() + b * dim, sizeof(float) * dim);
  ctx.clear();  // nothing for W
  return grad_input;
}

}  // namespace pf
