#include "runtime/layers/patch_embedding.h"

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/rows.h"
#include "runtime/layers/cuda_dispatch.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf {

PatchEmbedding::PatchEmbedding(std::string name, const PatchEmbeddingConfig& config)
    : Layer(std::move(name)), config_(config) {
  const PatchEmbeddingConfig& c = config_;
  PF_CHECK_ARG(c.channels > 0 && c.height > 0 && c.width > 0 && c.patch > 0 && c.dim > 0, "patch_embedding '",
               this->name(), "': channels, height, width, patch and dim must be > 0, got ", c.channels, ", ", c.height,
               ", ", c.width, ", ", c.patch, " and ", c.dim);
  PF_CHECK_ARG(c.height % c.patch == 0, "patch_embedding '", this->name(), "': height ", c.height,
               " is not divisible by patch ", c.patch);
  PF_CHECK_ARG(c.width % c.patch == 0, "patch_embedding '", this->name(), "': width ", c.width,
               " is not divisible by patch ", c.patch);
  // C*H*W is one row of the input: a tensor dimension. Each factor is at most 2^63 / 2 here, so
  // the checks below divide instead of multiplying.
  const int64_t max = limits::kMaxDimension;
  PF_CHECK_ARG(c.height <= max / c.width && c.channels <= max / (c.height * c.width), "patch_embedding '",
               this->name(), "': an image of ", c.channels, " x ", c.height, " x ", c.width,
               " values is more than the limit of ", max, " per row");
  PF_CHECK_ARG(std::isfinite(c.init_std) && c.init_std >= 0.0f, "patch_embedding '", this->name(),
               "': init_std must be finite and >= 0, got ", c.init_std);
  weight_ = make_parameter(join_name(this->name(), "weight"), {c.dim, patch_size()}, InitSpec::normal(c.init_std));
  bias_ = make_parameter(join_name(this->name(), "bias"), {c.dim}, InitSpec::zeros());
  cls_ = make_parameter(join_name(this->name(), "cls"), {c.dim}, InitSpec::normal(c.init_std));
  positions_ = make_parameter(join_name(this->name(), "positions"), {1 + patches(), c.dim},
                              InitSpec::normal(c.init_std));
}

nlohmann::json PatchEmbedding::config() const {
  return {{"type", type()},          {"name", name()},         {"channels", config_.channels},
          {"height", config_.height}, {"width", config_.width}, {"patch", config_.patch},
          {"dim", config_.dim},       {"init_std", config_.init_std}};
}

std::vector<Parameter*> PatchEmbedding::parameters() { return {&weight_, &bias_, &cls_, &positions_}; }

// Patch i of an image covers rows [top, top + p) and columns [left, left + p) of every channel;
// its value (ch, y, x) sits at column (ch * p + y) * p + x of its patch row.
void PatchEmbedding::gather_patches(const float* images, int64_t batch, float* patches) const {
  const int64_t C = config_.channels, H = config_.height, W = config_.width, p = config_.patch;
  const int64_t across = W / p, n = this->patches(), k = patch_size();
  for (int64_t b = 0; b < batch; ++b) {
    const float* image = images + b * C * H * W;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t top = (i / across) * p, left = (i % across) * p;
      float* dst = patches + (b * n + i) * k;
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t y = 0; y < p; ++y)
          std::memcpy(dst + (ch * p + y) * p, image + (ch * H + top + y) * W + left, sizeof(float) * p);
    }
  }
}

void PatchEmbedding::scatter_patches(const float* patches, int64_t batch, float* images) const {
  const int64_t C = config_.channels, H = config_.height, W = config_.width, p = config_.patch;
  const int64_t across = W / p, n = this->patches(), k = patch_size();
  for (int64_t b = 0; b < batch; ++b) {
    float* image = images + b * C * H * W;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t top = (i / across) * p, left = (i % across) * p;
      const float* src = patches + (b * n + i) * k;
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t y = 0; y < p; ++y)
          std::memcpy(image + (ch * H + top + y) * W + left, src + (ch * p + y) * p, sizeof(float) * p);
    }
  }
}

PatchGeometry PatchEmbedding::device_geometry() const {
  return {config_.channels, config_.height, config_.width, config_.patch, config_.dim};
}

void PatchEmbedding::gather_patch_rows(const float* grad_output, int64_t batch, float* rows) const {
  const int64_t n = patches(), d = config_.dim;
  for (int64_t b = 0; b < batch; ++b)
    std::memcpy(rows + b * n * d, grad_output + (b * (1 + n) + 1) * d, sizeof(float) * n * d);
}

Tensor PatchEmbedding::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 2 && input.dim(1) == image_size(),
               "patch_embedding '", name(), "': expected f32 images [B, ", image_size(), "] (C*H*W = ",
               config_.channels, "*", config_.height, "*", config_.width, "), got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ", shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
  if (is_cuda(input)) {  // the same steps and context through the CUDA backend
    Tensor output = cuda_backend().patch_embedding_forward(input, weight_.value, bias_.value, cls_.value,
                                                           positions_.value, device_geometry());
    ctx.save("input", input);
    return output;
  }
  const int64_t batch = input.dim(0), n = patches(), k = patch_size(), d = config_.dim, tokens = 1 + n;
  Tensor x, y;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    x = Tensor::empty({batch * n, k});
    y = Tensor::empty({batch * n, d});
  }
  gather_patches(input.f32(), batch, x.f32());
  // y = bias + X W^T (as Linear computes it), then each token gets its position.
  cpu::broadcast_rows(batch * n, d, bias_.value.f32(), y.f32());
  cpu::gemm(false, true, batch * n, d, k, 1.0f, x.f32(), weight_.value.f32(), 1.0f, y.f32());
  Tensor output = Tensor::empty({batch, tokens, d});
  const float* cls = cls_.value.f32();
  const float* pos = positions_.value.f32();
  for (int64_t b = 0; b < batch; ++b) {
    float* out = output.f32() + b * tokens * d;
    for (int64_t c = 0; c < d; ++c) out[c] = cls[c] + pos[c];
    cpu::add((tokens - 1) * d, y.f32() + b * n * d, pos + d, out + d);
  }
  ctx.save("input", input);  // the caller's images: W re-gathers the patches from them
  return output;
}

void PatchEmbedding::check_output_gradient(const Tensor& input, const Tensor& grad_output) const {
  const Shape expected = {input.dim(0), 1 + patches(), config_.dim};
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == expected,
               "patch_embedding '", name(), "': output gradient ",
               grad_output.defined() ? shape_to_string(grad_output.shape()) : "undefined",
               " does not match the forward output ", shape_to_string(expected));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward input", input.device());
}

Tensor PatchEmbedding::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& input = ctx.get("input");
  check_output_gradient(input, grad_output);
  if (is_cuda(input)) {
    Tensor grad_input =
        cuda_backend().patch_embedding_backward_input(grad_output, weight_.value, device_geometry(), input.shape());
    ctx.save("grad_output", grad_output);
    return grad_input;
  }
  const int64_t batch = input.dim(0), n = patches(), k = patch_size(), d = config_.dim;
  Tensor rows, dx;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    rows = Tensor::empty({batch * n, d});
    dx = Tensor::empty({batch * n, k});
  }
  gather_patch_rows(grad_output.f32(), batch, rows.f32());
  cpu::gemm(false, false, batch * n, k, d, 1.0f, rows.f32(), weight_.value.f32(), 0.0f, dx.f32());
  Tensor grad_input = Tensor::empty(input.shape());
  scatter_patches(dx.f32(), batch, grad_input.f32());
  ctx.save("grad_output", grad_output);
  return grad_input;
}

void PatchEmbedding::backward_weight(SavedContext& ctx) {
  const Tensor& input = ctx.get("input");
  const Tensor& grad_output = ctx.get("grad_output");
  if (is_cuda(input)) {
    cuda_backend().patch_embedding_backward_weight(input, grad_output, device_geometry(), weight_.grad, bias_.grad,
                                                   cls_.grad, positions_.grad);
    ctx.clear();
    return;
  }
  const int64_t batch = input.dim(0), n = patches(), k = patch_size(), d = config_.dim, tokens = 1 + n;
  Tensor x, rows;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    x = Tensor::empty({batch * n, k});
    rows = Tensor::empty({batch * n, d});
  }
  gather_patches(input.f32(), batch, x.f32());
  gather_patch_rows(grad_output.f32(), batch, rows.f32());
  // dW += dY^T X and dbias += column sums of dY over the patch tokens; dcls += the class tokens'
  // gradients; dpositions += each token's gradient. Every sum runs over the rows in order.
  cpu::gemm(true, false, d, k, batch * n, 1.0f, rows.f32(), x.f32(), 1.0f, weight_.grad.f32());
  cpu::accumulate_column_sums(batch * n, d, rows.f32(), bias_.grad.f32());
  const float* dy = grad_output.f32();
  float* dcls = cls_.grad.f32();
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < d; ++c) dcls[c] += dy[b * tokens * d + c];
  cpu::accumulate_column_sums(batch, tokens * d, dy, positions_.grad.f32());
  ctx.clear();
}

}  // namespace pf
