// The image layers' operations of the CUDA backend (cuda_backend.h): GroupNorm, Conv2d (im2col +
// cuBLAS), pooling, and a Vision Transformer's patch embedding and class token, on the kernels of
// //runtime/kernels/cuda, composed in the CPU layers' order (runtime/layers/conv2d.cc, ...).
#include "runtime/backend/cuda/cuda_runtime_backend.h"
#include "runtime/backend/cuda/on_device.h"
#include "runtime/kernels/cuda/conv2d.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/gemm.h"
#include "runtime/kernels/cuda/group_norm.h"
#include "runtime/kernels/cuda/patch_embedding.h"
#include "runtime/kernels/cuda/pooling.h"

namespace pf::cuda {

namespace {

cuda::GroupNormShape group_norm_shape(const Tensor& x, int64_t channels, int64_t groups) {
  const int64_t batch = x.dim(0);
  return {batch, channels, groups, batch == 0 ? 0 : x.numel() / (batch * channels)};
}

cuda::ConvShape conv_shape(const ConvGeometry& g) {
  return {g.batch, g.channels, g.height, g.width, g.kernel, g.stride, g.padding, g.out_height, g.out_width};
}

cuda::PatchShape patch_shape(int64_t batch, const PatchGeometry& g) {
  return {batch, g.channels, g.height, g.width, g.patch, g.dim};
}

// f32 scratch of `count` floats (OnDevice::workspace), as a pointer-carrying tensor.
Tensor scratch(const OnDevice& on, int64_t count) { return on.workspace(static_cast<size_t>(count) * sizeof(float)); }

}  // namespace

void CudaRuntimeBackend::group_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                                            float eps, Tensor* y, Tensor* xhat, Tensor* rstd) {
  OnDevice on(x);
  const cuda::GroupNormShape s = group_norm_shape(x, weight.numel(), groups);
  *y = on.empty(x.shape());
  *xhat = on.empty(x.shape());
  *rstd = on.empty({s.batch, groups});
  cuda::group_norm_forward<float>(on.stream(), s, eps, ptr(x), ptr(weight), ptr(bias), mut(*y), mut(*xhat),
                                  mut(*rstd));
}

Tensor CudaRuntimeBackend::group_norm_backward_input(const Tensor& xhat, const Tensor& rstd, const Tensor& weight,
                                                     int64_t groups, const Tensor& dy) {
  OnDevice on(xhat);
  const cuda::GroupNormShape s = group_norm_shape(xhat, weight.numel(), groups);
  Tensor dx = on.empty(xhat.shape());
  cuda::group_norm_backward_input<float>(on.stream(), s, ptr(xhat), ptr(rstd), ptr(weight), ptr(dy), mut(dx));
  return dx;
}

void CudaRuntimeBackend::group_norm_backward_weight(const Tensor& xhat, const Tensor& dy, const Tensor& dweight,
                                                    const Tensor& dbias) {
  OnDevice on(xhat);
  // The groups do not matter for W (per channel sums).
  const cuda::GroupNormShape s = group_norm_shape(xhat, dweight.numel(), 1);
  cuda::group_norm_backward_weight<float>(on.stream(), s, ptr(xhat), ptr(dy), mut(dweight), mut(dbias));
}

Tensor CudaRuntimeBackend::conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const ConvGeometry& g) {
  OnDevice on(x);
  const cuda::ConvShape s = conv_shape(g);
  const int64_t rows = s.rows(), cols = s.cols(), out = g.out_channels;
  Tensor patches = scratch(on, rows * cols), flat = scratch(on, rows * out);  // P and Y' [B Ho Wo, O]
  cuda::im2col<float>(on.stream(), s, ptr(x), mut(patches));
  float beta = 0.0f;
  if (bias.defined()) {  // bias rows, then the product with beta = 1, as the CPU
    cuda::fill_rows_with_bias<float>(on.stream(), rows, out, ptr(bias), mut(flat));
    beta = 1.0f;
  }
  cuda::gemm<float, float>(on.stream(), false, true, rows, out, cols, 1.0f, ptr(patches), ptr(weight), beta, mut(flat));
  Tensor y = on.empty({g.batch, out, g.out_height, g.out_width});
  cuda::transpose_batched<float>(on.stream(), g.batch, g.out_height * g.out_width, out, ptr(flat), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::conv2d_backward_input(const Tensor& dy, const Tensor& weight, const ConvGeometry& g,
                                                 const Shape& input_shape, Tensor* grad_rows) {
  OnDevice on(dy);
  const cuda::ConvShape s = conv_shape(g);
  const int64_t rows = s.rows(), cols = s.cols(), out = g.out_channels;
  *grad_rows = on.empty({rows, out});  // dY' [B Ho Wo, O]
  cuda::transpose_batched<float>(on.stream(), g.batch, out, g.out_height * g.out_width, ptr(dy), mut(*grad_rows));
  Tensor grad_patches = scratch(on, rows * cols);
  cuda::gemm<float, float>(on.stream(), false, false, rows, cols, out, 1.0f, ptr(*grad_rows), ptr(weight), 0.0f,
                           mut(grad_patches));
  Tensor dx = on.empty(input_shape);
  cuda::col2im<float>(on.stream(), s, ptr(grad_patches), mut(dx));
  return dx;
}

void CudaRuntimeBackend::conv2d_backward_weight(const Tensor& x, const Tensor& grad_rows, const ConvGeometry& g,
                                                const Tensor& dweight, const Tensor& dbias) {
  OnDevice on(x);
  const cuda::ConvShape s = conv_shape(g);
  const int64_t rows = s.rows(), cols = s.cols(), out = g.out_channels;
  Tensor patches = scratch(on, rows * cols);  // rebuilt from the saved input, as on the CPU
  cuda::im2col<float>(on.stream(), s, ptr(x), mut(patches));
  cuda::gemm<float, float>(on.stream(), true, false, out, cols, rows, 1.0f, ptr(grad_rows), ptr(patches), 1.0f,
                           mut(dweight));
  if (dbias.defined()) cuda::bias_backward<float>(on.stream(), rows, out, ptr(grad_rows), mut(dbias));
}

void CudaRuntimeBackend::pool2d_forward(const Tensor& x, bool max, int64_t kernel, int64_t stride, Tensor* y,
                                        Tensor* argmax) {
  OnDevice on(x);
  const cuda::PoolShape s{x.dim(0) * x.dim(1), x.dim(2), x.dim(3), kernel, stride};
  const Shape out_shape = {x.dim(0), x.dim(1), s.out_height(), s.out_width()};
  *y = on.empty(out_shape);
  *argmax = max ? on.empty(out_shape, DType::kI32) : Tensor();
  cuda::pool2d_forward<float>(on.stream(), s, max, ptr(x), mut(*y), max ? argmax->data<int32_t>() : nullptr);
}

Tensor CudaRuntimeBackend::pool2d_backward(const Tensor& dy, const Tensor& argmax, bool max, int64_t kernel,
                                           int64_t stride, const Shape& input_shape) {
  OnDevice on(dy);
  const cuda::PoolShape s{input_shape[0] * input_shape[1], input_shape[2], input_shape[3], kernel, stride};
  Tensor dx = on.empty(input_shape);
  cuda::pool2d_backward<float>(on.stream(), s, max, ptr(dy), max ? argmax.data<int32_t>() : nullptr, mut(dx));
  return dx;
}

Tensor CudaRuntimeBackend::global_avg_pool_forward(const Tensor& x) {
  OnDevice on(x);
  const int64_t planes = x.dim(0) * x.dim(1), spatial = planes == 0 ? 0 : x.numel() / planes;
  Tensor y = on.empty({x.dim(0), x.dim(1)});
  cuda::global_avg_pool_forward<float>(on.stream(), planes, spatial, ptr(x), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::global_avg_pool_backward(const Tensor& dy, const Shape& input_shape) {
  OnDevice on(dy);
  const int64_t planes = input_shape[0] * input_shape[1];
  int64_t spatial = 1;  // the trailing dimensions
  for (size_t i = 2; i < input_shape.size(); ++i) spatial *= input_shape[i];
  Tensor dx = on.empty(input_shape);
  cuda::global_avg_pool_backward<float>(on.stream(), planes, spatial, ptr(dy), mut(dx));
  return dx;
}

Tensor CudaRuntimeBackend::patch_embedding_forward(const Tensor& images, const Tensor& weight, const Tensor& bias,
                                                   const Tensor& cls, const Tensor& positions,
                                                   const PatchGeometry& g) {
  OnDevice on(images);
  const cuda::PatchShape s = patch_shape(images.dim(0), g);
  const int64_t rows = s.batch * s.patches(), k = s.patch_size(), d = g.dim;
  Tensor x = scratch(on, rows * k), y = scratch(on, rows * d);
  cuda::gather_patches<float>(on.stream(), s, ptr(images), mut(x));
  // y = bias + X W^T (as Linear computes it), then each token gets its position.
  cuda::fill_rows_with_bias<float>(on.stream(), rows, d, ptr(bias), mut(y));
  cuda::gemm<float, float>(on.stream(), false, true, rows, d, k, 1.0f, ptr(x), ptr(weight), 1.0f, mut(y));
  Tensor tokens = on.empty({s.batch, 1 + s.patches(), d});
  cuda::assemble_patch_tokens<float>(on.stream(), s, ptr(y), ptr(cls), ptr(positions), mut(tokens));
  return tokens;
}

Tensor CudaRuntimeBackend::patch_embedding_backward_input(const Tensor& dy, const Tensor& weight,
                                                          const PatchGeometry& g, const Shape& input_shape) {
  OnDevice on(dy);
  const cuda::PatchShape s = patch_shape(input_shape[0], g);
  const int64_t rows = s.batch * s.patches(), k = s.patch_size(), d = g.dim;
  Tensor grad_rows = scratch(on, rows * d), grad_patches = scratch(on, rows * k);
  cuda::patch_token_rows<float>(on.stream(), s, ptr(dy), mut(grad_rows));
  cuda::gemm<float, float>(on.stream(), false, false, rows, k, d, 1.0f, ptr(grad_rows), ptr(weight), 0.0f,
                           mut(grad_patches));
  Tensor dx = on.empty(input_shape);
  cuda::scatter_patches<float>(on.stream(), s, ptr(grad_patches), mut(dx));
  return dx;
}

void CudaRuntimeBackend::patch_embedding_backward_weight(const Tensor& images, const Tensor& dy,
                                                         const PatchGeometry& g, const Tensor& dweight,
                                                         const Tensor& dbias, const Tensor& dcls,
                                                         const Tensor& dpositions) {
  OnDevice on(images);
  const cuda::PatchShape s = patch_shape(images.dim(0), g);
  const int64_t rows = s.batch * s.patches(), k = s.patch_size(), d = g.dim, tokens = 1 + s.patches();
  Tensor x = scratch(on, rows * k), grad_rows = scratch(on, rows * d);
  cuda::gather_patches<float>(on.stream(), s, ptr(images), mut(x));
  cuda::patch_token_rows<float>(on.stream(), s, ptr(dy), mut(grad_rows));
  cuda::gemm<float, float>(on.stream(), true, false, d, k, rows, 1.0f, ptr(grad_rows), ptr(x), 1.0f, mut(dweight));
  cuda::bias_backward<float>(on.stream(), rows, d, ptr(grad_rows), mut(dbias));
  cuda::class_token_grad<float>(on.stream(), s.batch, tokens, d, ptr(dy), mut(dcls));
  cuda::bias_backward<float>(on.stream(), s.batch, tokens * d, ptr(dy), mut(dpositions));
}

Tensor CudaRuntimeBackend::class_token_forward(const Tensor& x) {
  OnDevice on(x);
  const int64_t batch = x.dim(0), steps = x.dim(1), dim = x.dim(2);
  Tensor y = on.empty({batch, dim});
  cuda::first_token_forward<float>(on.stream(), batch, steps, dim, ptr(x), mut(y));
  return y;
}

Tensor CudaRuntimeBackend::class_token_backward(const Tensor& dy, int64_t steps) {
  OnDevice on(dy);
  const int64_t batch = dy.dim(0), dim = dy.dim(1);
  Tensor dx = on.empty({batch, steps, dim});
  cuda::first_token_backward<float>(on.stream(), batch, steps, dim, ptr(dy), mut(dx));
  return dx;
}

}  // namespace pf::cuda
