// The Llama layers' operations of the CUDA backend (cuda_backend.h): RMSNorm, SwiGLU and rotary
// positions, on the kernels of //runtime/kernels/cuda. Grouped-query attention is the attention
// core's (layer_ops.cc).
#include "runtime/backend/cuda/cuda_runtime_backend.h"
#include "runtime/backend/cuda/on_device.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/rms_norm.h"
#include "runtime/kernels/cuda/rotary.h"

namespace pf::cuda {

void CudaRuntimeBackend::rotary_embedding(const Tensor& qkv, int64_t rotated_heads, int64_t head_dim, int64_t offset,
                                          float theta, bool inverse) {
  OnDevice on(qkv);
  cuda::RotaryShape s;
  s.batch = qkv.dim(0);
  s.steps = qkv.dim(1);
  s.width = qkv.dim(2);
  s.rotated_heads = rotated_heads;
  s.head_dim = head_dim;
  s.offset = offset;
  s.theta = theta;
  Tensor workspace = on.workspace(cuda::rotary_workspace_bytes(s));
  cuda::rotary_embedding<float>(on.stream(), s, inverse, mut(qkv), workspace.data<void>());
}

void CudaRuntimeBackend::rms_norm_forward(const Tensor& x, const Tensor& weight, float eps, Tensor* y, Tensor* xhat,
                                          Tensor* rstd) {
  OnDevice on(x);
  const int64_t dim = weight.numel(), rows = x.numel() / dim;
  *y = on.empty(x.shape());
  *xhat = on.empty(x.shape());
  *rstd = on.empty({rows});
  cuda::rms_norm_forward<float>(on.stream(), rows, dim, eps, ptr(x), ptr(weight), mut(*y), mut(*xhat), mut(*rstd));
}

Tensor CudaRuntimeBackend::rms_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight,
                                                   const Tensor& dy) {
  OnDevice on(xhat);
  const int64_t dim = weight.numel(), rows = xhat.numel() / dim;
  Tensor dx = on.empty(xhat.shape());
  cuda::rms_norm_backward_input<float>(on.stream(), rows, dim, ptr(xhat), ptr(rstd), ptr(weight), ptr(dy), mut(dx));
  return dx;
}

void CudaRuntimeBackend::rms_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight) {
  OnDevice on(xhat);
  const int64_t dim = dweight.numel(), rows = xhat.numel() / dim;
  cuda::rms_norm_backward_weight<float>(on.stream(), rows, dim, ptr(xhat), ptr(dy), mut(dweight));
}

Tensor CudaRuntimeBackend::swiglu_forward(const Tensor& x) {
  OnDevice on(x);
  const int64_t half = x.dim(-1) / 2, rows = x.numel() / x.dim(-1);
  Shape shape = x.shape();
  shape.back() = half;
  Tensor y = on.empty(shape);
  cuda::swiglu_forward<float>(on.stream(), rows, half, ptr(x), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::swiglu_backward(const Tensor& x, const Tensor& dy) {
  OnDevice on(x);
  const int64_t half = x.dim(-1) / 2, rows = x.numel() / x.dim(-1);
  Tensor dx = on.empty(x.shape());
  cuda::swiglu_backward<float>(on.stream(), rows, half, ptr(x), ptr(dy), mut(dx));
  return dx;
}

}  // namespace pf::cuda
