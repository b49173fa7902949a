// A Vision Transformer's patch embedding (ViT, Dosovitskiy et al. 2021): images f32 [B, C*H*W],
// each row one image in channel-major (c, y, x) order as image rows come from a CSV or CIFAR-10
// file, -> tokens f32 [B, 1 + N, dim], N = (H / patch) * (W / patch):
//   y[b, 0]     = cls + positions[0]                            (the learned class token)
//   y[b, 1 + n] = weight x_n + bias + positions[1 + n]          (n < N)
// where x_n is patch n (patches in row-major order over the image, patch rows then columns) flattened
// in (c, py, px) order: C * patch * patch values, so weight [dim, C*p*p] is a Linear on the patch
// and equals a patch x patch convolution with stride patch. Parameters, in this order:
// "<name>.weight" [dim, C*p*p], "<name>.bias" [dim], "<name>.cls" [dim], "<name>.positions"
// [1 + N, dim]; initialised as the GPT embedding's are, normal(init_std), except the bias (zeros).
// H and W must be divisible by patch.
//
// The input gradient is real: backward_input returns d(images) [B, C*H*W] (the patches'
// gradients, weight^T dy, put back where the patches came from; patches do not overlap, so no
// element is a sum of two). The runtime drops the first stage's input gradient, as it drops the
// MLP's first Linear's, so in a ViT it costs one GEMM and nothing else; but images are real
// inputs, the layer may follow another one (e.g. a normalisation), and the layer-contract checks
// compare it with finite differences. (The token Embedding returns an undefined Tensor because
// token ids have no gradient.)
//
// backward_input keeps the output gradient next to the images (saved by the forward: the caller's
// storage, no copy); backward_weight re-gathers the patches from them and adds dW += dy^T X,
// dbias, dcls and dpositions (sums over the batch in row order) and releases both. CUDA tensors
// run the same steps with the same context through the CUDA backend
// (runtime/kernels/cuda/patch_embedding.h, cuBLAS, fixed-order column sums); sequence slices do
// not apply (the input is not a token sequence).
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

struct PatchGeometry;

struct PatchEmbeddingConfig {
  int64_t channels = 1, height = 0, width = 0;  // the image: C, H, W
  int64_t patch = 0;                            // square patches of patch x patch pixels
  int64_t dim = 0;                              // the token width
  float init_std = 0.02f;
};

class PatchEmbedding : public Layer {
 public:
  PatchEmbedding(std::string name, const PatchEmbeddingConfig& config);
  const char* type() const override { return "patch_embedding"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  const PatchEmbeddingConfig& patch_config() const { return config_; }
  int64_t patches() const { return (config_.height / config_.patch) * (config_.width / config_.patch); }  // N
  int64_t image_size() const { return config_.channels * config_.height * config_.width; }  // C*H*W
  int64_t patch_size() const { return config_.channels * config_.patch * config_.patch; }  // C*p*p

 private:
  // Copies the patches of images [B, C*H*W] into patches [B*N, C*p*p] (gather), or patch
  // gradients back into image gradients (scatter: every image element belongs to one patch).
  void gather_patches(const float* images, int64_t batch, float* patches) const;
  void scatter_patches(const float* patches, int64_t batch, float* images) const;
  // The output gradient's patch-token rows [B, 1 + N, dim] -> [B*N, dim], contiguous.
  void gather_patch_rows(const float* grad_output, int64_t batch, float* rows) const;
  void check_output_gradient(const Tensor& input, const Tensor& grad_output) const;
  PatchGeometry device_geometry() const;  // for the CUDA backend

  PatchEmbeddingConfig config_;
  Parameter weight_, bias_, cls_, positions_;
};

}  // namespace pf
