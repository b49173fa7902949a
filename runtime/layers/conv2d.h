// 2-D convolution (PyTorch's Conv2d with one group, dilation 1, zero padding): x [B, C, H, W] -> y
// [B, O, Ho, Wo], Ho = (H + 2 padding - kernel) / stride + 1 (Wo likewise). The input may also be
// image rows [B, C * H * W] (channel-major, as image data arrives) when the layer is given the
// height and width. Parameters "<name>.weight" [O, C, k, k] (PyTorch's layout; initialised normal
// with He's std sqrt(2 / (C k k)) unless init_std is given) and "<name>.bias" [O].
//
// im2col + one GEMM per micro-batch, on the CPU and (the same steps and context, through the CUDA
// backend: runtime/kernels/cuda/conv2d.h and cuBLAS) on CUDA tensors. The patch matrix P [B Ho Wo, C k k] has one row per
// output position in (b, y, x) order and one column per (c, ky, kx), zero where the window leaves
// the image; Y' = P W^T + b is [B Ho Wo, O] and is transposed into y.
//   B: dY' = the output gradient transposed back; dP = dY' W; dx = col2im(dP), which adds dP's
//      elements into dx in (row, column) order, so the result is deterministic.
//   W: dW += dY'^T P, with P rebuilt from the saved input (k k times smaller than keeping P);
//      db += the column sums of dY' in row order.
// The context keeps the input and, after B, dY'.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

struct ConvGeometry;

struct Conv2dOptions {
  int64_t kernel = 3;
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;
  float init_std = 0.0f;  // 0: sqrt(2 / (in_channels kernel^2))
  // The image size of rows [B, C H W]; 0 when the input always comes as [B, C, H, W].
  int64_t height = 0, width = 0;
};

class Conv2d : public Layer {
 public:
  Conv2d(std::string name, int64_t in_channels, int64_t out_channels, const Conv2dOptions& options = {});
  const char* type() const override { return "conv2d"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  const Conv2dOptions& options() const { return options_; }
  // The output size along a side of `size` pixels (0 when the kernel does not fit).
  int64_t output_size(int64_t size) const;

 private:
  struct Geometry {
    int64_t batch, height, width, out_height, out_width;
  };
  Geometry geometry_of(const Tensor& input) const;
  Geometry saved_geometry(const SavedContext& ctx) const;
  ConvGeometry device_geometry(const Geometry& g) const;  // for the CUDA backend
  // P [B Ho Wo, C k k] of an input in [B, C, H, W] order.
  void im2col(const float* x, const Geometry& g, float* patches) const;

  int64_t in_, out_;
  Conv2dOptions options_;
  Parameter weight_, bias_;
};

}  // namespace pf
