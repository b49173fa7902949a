// Pooling over the spatial positions of feature maps x [B, C, H, W] (no parameters; CUDA tensors run
// runtime/kernels/cuda/pooling.h with the same context and, for max and average windows, the same
// order of additions in B).
//  * Pool2d, max or average (PyTorch's MaxPool2d / AvgPool2d without padding): y [B, C, Ho, Wo],
//    Ho = (H - kernel) / stride + 1, each output the maximum (the first in window order, or a NaN)
//    or the mean of its kernel x kernel window. B routes the gradient to the maximum's position or
//    spreads it evenly over the window, adding overlapping windows' parts in output order.
//  * GlobalAvgPool: y [B, C], the mean over H W (a ResNet's last feature map into its classifier);
//    also takes [B, C, L], averaging over L.
// The max pool keeps each output's argmax (int32) for B; the others keep only sizes. Nothing is
// left for W.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Pool2d : public Layer {
 public:
  enum class Mode { kMax, kAverage };
  Pool2d(std::string name, Mode mode, int64_t kernel, int64_t stride = 0);  // stride 0: the kernel
  const char* type() const override { return mode_ == Mode::kMax ? "max_pool2d" : "avg_pool2d"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;

  Mode mode() const { return mode_; }
  int64_t kernel() const { return kernel_; }
  int64_t stride() const { return stride_; }

 private:
  Mode mode_;
  int64_t kernel_, stride_;
};

class GlobalAvgPool : public Layer {
 public:
  explicit GlobalAvgPool(std::string name);
  const char* type() const override { return "global_avg_pool"; }
  nlohmann::json config() const override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
};

}  // namespace pf
