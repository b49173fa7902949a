#include "runtime/layers/pooling.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

namespace {

// The saved input dimensions of GlobalAvgPool (set_int keys must outlive the context).
constexpr const char* kDimKeys[] = {"dim0", "dim1", "dim2", "dim3"};

void check_feature_maps(const Layer& layer, const Tensor& input, int min_rank) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() >= min_rank && input.rank() <= 4,
               layer.type(), " '", layer.name(), "': expected f32 feature maps [B, C, H, W]",
               min_rank == 4 ? "" : " or [B, C, L]", ", got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               input.defined() ? shape_to_string(input.shape()) : "");
}

void check_gradient(const Layer& layer, const Tensor& grad_output, const Shape& expected) {
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.shape() == expected,
               layer.type(), " '", layer.name(), "': output gradient ",
               grad_output.defined() ? shape_to_string(grad_output.shape()) : "undefined",
               " does not match the forward output ", shape_to_string(expected));
}

}  // namespace

Pool2d::Pool2d(std::string name, Mode mode, int64_t kernel, int64_t stride)
    : Layer(std::move(name)), mode_(mode), kernel_(kernel), stride_(stride == 0 ? kernel : stride) {
  PF_CHECK_ARG(kernel_ > 0 && stride_ > 0, type(), " '", this->name(), "': kernel and stride must be > 0, got ",
               kernel_, " and ", stride_);
}

nlohmann::json Pool2d::config() const {
  return {{"type", type()}, {"name", name()}, {"kernel", kernel_}, {"stride", stride_}};
}

Tensor Pool2d::forward(const Tensor& input, SavedContext& ctx) {
  check_feature_maps(*this, input, 4);
  const int64_t batch = input.dim(0), channels = input.dim(1), h = input.dim(2), w = input.dim(3);
  PF_CHECK_ARG(h >= kernel_ && w >= kernel_, type(), " '", name(), "': a ", kernel_, "x", kernel_,
               " window does not fit input ", shape_to_string(input.shape()));
  const int64_t oh = (h - kernel_) / stride_ + 1, ow = (w - kernel_) / stride_ + 1;
  ctx.set_int("batch", batch);
  ctx.set_int("channels", channels);
  ctx.set_int("height", h);
  ctx.set_int("width", w);
  if (is_cuda(input)) {  // the same context (the argmax an i32 CUDA tensor)
    Tensor output, argmax;
    cuda_backend().pool2d_forward(input, mode_ == Mode::kMax, kernel_, stride_, &output, &argmax);
    if (mode_ == Mode::kMax) ctx.save("argmax", argmax);
    return output;
  }
  Tensor output = Tensor::empty({batch, channels, oh, ow});
  Tensor argmax = mode_ == Mode::kMax ? Tensor::empty({batch, channels, oh, ow}, DType::kI32) : Tensor();
  const float inverse_count = 1.0f / static_cast<float>(kernel_ * kernel_);
  for (int64_t plane = 0; plane < batch * channels; ++plane) {
    const float* x = input.f32() + plane * h * w;
    float* y = output.f32() + plane * oh * ow;
    int32_t* best = mode_ == Mode::kMax ? argmax.data<int32_t>() + plane * oh * ow : nullptr;
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t first = oy * stride_ * w + ox * stride_;
        if (mode_ == Mode::kMax) {
          int64_t at = first;
          for (int64_t ky = 0; ky < kernel_; ++ky) {
            for (int64_t kx = 0; kx < kernel_; ++kx) {
              const int64_t i = first + ky * w + kx;
              if (x[i] > x[at] || (std::isnan(x[i]) && !std::isnan(x[at]))) at = i;
            }
          }
          y[oy * ow + ox] = x[at];
          best[oy * ow + ox] = static_cast<int32_t>(at);
        } else {
          float sum = 0.0f;
          for (int64_t ky = 0; ky < kernel_; ++ky) {
            for (int64_t kx = 0; kx < kernel_; ++kx) sum += x[first + ky * w + kx];
          }
          y[oy * ow + ox] = sum * inverse_count;
        }
      }
    }
  }
  if (mode_ == Mode::kMax) ctx.save("argmax", argmax);
  return output;
}

Tensor Pool2d::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const int64_t batch = ctx.get_int("batch"), channels = ctx.get_int("channels");
  const int64_t h = ctx.get_int("height"), w = ctx.get_int("width");
  const int64_t oh = (h - kernel_) / stride_ + 1, ow = (w - kernel_) / stride_ + 1;
  check_gradient(*this, grad_output, {batch, channels, oh, ow});
  if (mode_ == Mode::kMax) {
    check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward argmax",
                      ctx.get("argmax").device());
  }
  if (is_cuda(grad_output)) {
    Tensor grad_input = cuda_backend().pool2d_backward(grad_output, mode_ == Mode::kMax ? ctx.get("argmax") : Tensor(),
                                                       mode_ == Mode::kMax, kernel_, stride_, {batch, channels, h, w});
    ctx.clear();
    return grad_input;
  }
  Tensor grad_input = Tensor::zeros({batch, channels, h, w});
  const float inverse_count = 1.0f / static_cast<float>(kernel_ * kernel_);
  for (int64_t plane = 0; plane < batch * channels; ++plane) {
    const float* dy = grad_output.f32() + plane * oh * ow;
    float* dx = grad_input.f32() + plane * h * w;
    if (mode_ == Mode::kMax) {
      const int32_t* best = ctx.get("argmax").data<int32_t>() + plane * oh * ow;
      for (int64_t i = 0; i < oh * ow; ++i) dx[best[i]] += dy[i];
      continue;
    }
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const float share = dy[oy * ow + ox] * inverse_count;
        const int64_t first = oy * stride_ * w + ox * stride_;
        for (int64_t ky = 0; ky < kernel_; ++ky) {
          for (int64_t kx = 0; kx < kernel_; ++kx) dx[first + ky * w + kx] += share;
        }
      }
    }
  }
  ctx.clear();
  return grad_input;
}

GlobalAvgPool::GlobalAvgPool(std::string name) : Layer(std::move(name)) {}

nlohmann::json GlobalAvgPool::config() const { return {{"type", type()}, {"name", name()}}; }

Tensor GlobalAvgPool::forward(const Tensor& input, SavedContext& ctx) {
  check_feature_maps(*this, input, 3);
  const int64_t batch = input.dim(0), channels = input.dim(1), spatial = input.numel() / (batch * channels);
  ctx.set_int("rank", input.rank());
  for (int i = 0; i < input.rank(); ++i) ctx.set_int(kDimKeys[i], input.dim(i));
  if (is_cuda(input)) return cuda_backend().global_avg_pool_forward(input);
  Tensor output = Tensor::empty({batch, channels});
  const float inverse_count = 1.0f / static_cast<float>(spatial);
  for (int64_t plane = 0; plane < batch * channels; ++plane) {
    const float* x = input.f32() + plane * spatial;
    float sum = 0.0f;
    for (int64_t i = 0; i < spatial; ++i) sum += x[i];
    output.f32()[plane] = sum * inverse_count;
  }
  return output;
}

Tensor GlobalAvgPool::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  Shape shape(static_cast<size_t>(ctx.get_int("rank")));
  for (size_t i = 0; i < shape.size(); ++i) shape[i] = ctx.get_int(kDimKeys[i]);
  const int64_t planes = shape[0] * shape[1], spatial = shape_numel(shape) / planes;
  check_gradient(*this, grad_output, {shape[0], shape[1]});
  if (is_cuda(grad_output)) {
    ctx.clear();
    return cuda_backend().global_avg_pool_backward(grad_output, shape);
  }
  Tensor grad_input = Tensor::empty(shape);
  const float inverse_count = 1.0f / static_cast<float>(spatial);
  for (int64_t plane = 0; plane < planes; ++plane) {
    const float share = grad_output.f32()[plane] * inverse_count;
    float* dx = grad_input.f32() + plane * spatial;
    for (int64_t i = 0; i < spatial; ++i) dx[i] = share;
  }
  ctx.clear();
  return grad_input;
}

}  // namespace pf
