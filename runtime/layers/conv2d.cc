#include "runtime/layers/conv2d.h"

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/rows.h"
#include "runtime/layers/cuda_dispatch.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf {

Conv2d::Conv2d(std::string name, int64_t in_channels, int64_t out_channels, const Conv2dOptions& options)
    : Layer(std::move(name)), in_(in_channels), out_(out_channels), options_(options) {
  const auto& o = options_;
  PF_CHECK_ARG(in_ > 0 && out_ > 0, "conv2d '", this->name(), "': in and out channels must be > 0, got ", in_,
               " and ", out_);
  PF_CHECK_ARG(o.kernel > 0 && o.stride > 0 && o.padding >= 0 && o.padding < o.kernel, "conv2d '", this->name(),
               "': needs kernel > 0, stride > 0 and 0 <= padding < kernel, got kernel ", o.kernel, ", stride ",
               o.stride, ", padding ", o.padding);
  PF_CHECK_ARG(o.height >= 0 && o.width >= 0 && (o.height == 0) == (o.width == 0), "conv2d '", this->name(),
               "': height and width are both given (> 0) or both 0, got ", o.height, " and ", o.width);
  PF_CHECK_ARG(o.height == 0 || (output_size(o.height) > 0 && output_size(o.width) > 0), "conv2d '",
               this->name(), "': a ", o.kernel, "x", o.kernel, " kernel with padding ", o.padding,
               " does not fit a ", o.height, "x", o.width, " image");
  PF_CHECK_ARG(std::isfinite(o.init_std) && o.init_std >= 0.0f, "conv2d '", this->name(),
               "': init_std must be finite and >= 0, got ", o.init_std);
  const float std_dev =
      o.init_std > 0.0f ? o.init_std : std::sqrt(2.0f / static_cast<float>(in_ * o.kernel * o.kernel));
  weight_ = make_parameter(join_name(this->name(), "weight"), {out_, in_, o.kernel, o.kernel},
                           InitSpec::normal(std_dev));
  if (o.bias) bias_ = make_parameter(join_name(this->name(), "bias"), {out_}, InitSpec::zeros());
}

nlohmann::json Conv2d::config() const {
  nlohmann::json j = {{"type", type()},         {"name", name()},          {"in_channels", in_},
                      {"out_channels", out_},   {"kernel", options_.kernel}, {"stride", options_.stride},
                      {"padding", options_.padding}, {"bias", options_.bias}};
  if (options_.init_std > 0.0f) j["init_std"] = options_.init_std;
  if (options_.height > 0) {
    j["height"] = options_.height;
    j["width"] = options_.width;
  }
  return j;
}

std::vector<Parameter*> Conv2d::parameters() {
  if (options_.bias) return {&weight_, &bias_};
  return {&weight_};
}

int64_t Conv2d::output_size(int64_t size) const {
  const int64_t span = size + 2 * options_.padding - options_.kernel;
  return span < 0 ? 0 : span / options_.stride + 1;
}

Conv2d::Geometry Conv2d::geometry_of(const Tensor& input) const {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32, "conv2d '", name(), "': expected an f32 input, got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined");
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
  Geometry g{};
  if (input.rank() == 4) {
    PF_CHECK_ARG(input.dim(1) == in_, "conv2d '", name(), "': expected ", in_, " input channels, got input ",
                 shape_to_string(input.shape()));
    PF_CHECK_ARG(options_.height == 0 || (input.dim(2) == options_.height && input.dim(3) == options_.width),
                 "conv2d '", name(), "': expected ", options_.height, "x", options_.width, " images, got input ",
                 shape_to_string(input.shape()));
    g = {input.dim(0), input.dim(2), input.dim(3), 0, 0};
  } else {
    PF_CHECK_ARG(input.rank() == 2 && options_.height > 0 && input.dim(1) == in_ * options_.height * options_.width,
                 "conv2d '", name(), "': expected input [B, ", in_, ", H, W]",
                 options_.height > 0 ? " or image rows [B, " + std::to_string(in_ * options_.height * options_.width) + "]"
                                     : std::string(),
                 ", got ", shape_to_string(input.shape()));
    g = {input.dim(0), options_.height, options_.width, 0, 0};
  }
  g.out_height = output_size(g.height);
  g.out_width = output_size(g.width);
  PF_CHECK_ARG(g.out_height > 0 && g.out_width > 0, "conv2d '", name(), "': a ", options_.kernel, "x",
               options_.kernel, " kernel with padding ", options_.padding, " does not fit input ",
               shape_to_string(input.shape()));
  return g;
}

Conv2d::Geometry Conv2d::saved_geometry(const SavedContext& ctx) const {
  return {ctx.get_int("batch"), ctx.get_int("height"), ctx.get_int("width"), ctx.get_int("out_height"),
          ctx.get_int("out_width")};
}

ConvGeometry Conv2d::device_geometry(const Geometry& g) const {
  return {g.batch,         in_,
          g.height,        g.width,
          out_,            options_.kernel,
          options_.stride, options_.padding,
          g.out_height,    g.out_width};
}

void Conv2d::im2col(const float* x, const Geometry& g, float* patches) const {
  const int64_t k = options_.kernel, s = options_.stride, pad = options_.padding;
  const int64_t cols = in_ * k * k;
  float* row = patches;
  for (int64_t b = 0; b < g.batch; ++b) {
    const float* image = x + b * in_ * g.height * g.width;
    for (int64_t oy = 0; oy < g.out_height; ++oy) {
      for (int64_t ox = 0; ox < g.out_width; ++ox, row += cols) {
        float* col = row;
        for (int64_t c = 0; c < in_; ++c) {
          const float* plane = image + c * g.height * g.width;
          for (int64_t ky = 0; ky < k; ++ky) {
            const int64_t iy = oy * s - pad + ky;
            for (int64_t kx = 0; kx < k; ++kx, ++col) {
              const int64_t ix = ox * s - pad + kx;
              *col = (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width) ? plane[iy * g.width + ix] : 0.0f;
            }
          }
        }
      }
    }
  }
}

Tensor Conv2d::forward(const Tensor& input, SavedContext& ctx) {
  const Geometry g = geometry_of(input);
  ctx.save("input", input);
  ctx.set_int("batch", g.batch);
  ctx.set_int("height", g.height);
  ctx.set_int("width", g.width);
  ctx.set_int("out_height", g.out_height);
  ctx.set_int("out_width", g.out_width);
  if (is_cuda(input))
    return cuda_backend().conv2d_forward(input, weight_.value, options_.bias ? bias_.value : Tensor(), device_geometry(g));
  const int64_t positions = g.out_height * g.out_width, rows = g.batch * positions;
  const int64_t cols = in_ * options_.kernel * options_.kernel;
  Tensor patches, flat;  // P and Y' [B Ho Wo, O]: scratch of this call
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    patches = Tensor::empty({rows, cols});
    flat = Tensor::empty({rows, out_});
  }
  im2col(input.f32(), g, patches.f32());
  float beta = 0.0f;
  if (options_.bias) {
    cpu::broadcast_rows(rows, out_, bias_.value.f32(), flat.f32());
    beta = 1.0f;
  }
  cpu::gemm(false, true, rows, out_, cols, 1.0f, patches.f32(), weight_.value.f32(), beta, flat.f32());
  Tensor output = Tensor::empty({g.batch, out_, g.out_height, g.out_width});
  const float* yt = flat.f32();
  float* y = output.f32();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t o = 0; o < out_; ++o) {
      float* dst = y + (b * out_ + o) * positions;
      const float* src = yt + b * positions * out_ + o;
      for (int64_t p = 0; p < positions; ++p) dst[p] = src[p * out_];
    }
  }
  return output;
}

Tensor Conv2d::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& input = ctx.get("input");
  const Geometry g = saved_geometry(ctx);
  const int64_t positions = g.out_height * g.out_width, rows = g.batch * positions;
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 && grad_output.numel() == rows * out_,
               "conv2d '", name(), "': output gradient ",
               grad_output.defined() ? shape_to_string(grad_output.shape()) : "undefined",
               " does not match the forward output [", g.batch, ", ", out_, ", ", g.out_height, ", ", g.out_width,
               "]");
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the parameters",
                    weight_.value.device());
  if (is_cuda(grad_output)) {
    Tensor grad_rows;
    Tensor grad_input =
        cuda_backend().conv2d_backward_input(grad_output, weight_.value, device_geometry(g), input.shape(), &grad_rows);
    ctx.save("grad_rows", grad_rows);
    return grad_input;
  }
  // dY' [B Ho Wo, O].
  Tensor grad_rows = Tensor::empty({rows, out_});
  const float* dy = grad_output.f32();
  float* dyt = grad_rows.f32();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t o = 0; o < out_; ++o) {
      const float* src = dy + (b * out_ + o) * positions;
      float* dst = dyt + b * positions * out_ + o;
      for (int64_t p = 0; p < positions; ++p) dst[p * out_] = src[p];
    }
  }
  const int64_t k = options_.kernel, s = options_.stride, pad = options_.padding;
  const int64_t cols = in_ * k * k;
  Tensor grad_patches;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    grad_patches = Tensor::empty({rows, cols});
  }
  cpu::gemm(false, false, rows, cols, out_, 1.0f, dyt, weight_.value.f32(), 0.0f, grad_patches.f32());
  Tensor grad_input = Tensor::zeros(input.shape());
  float* dx = grad_input.f32();
  const float* row = grad_patches.f32();
  for (int64_t b = 0; b < g.batch; ++b) {
    float* image = dx + b * in_ * g.height * g.width;
    for (int64_t oy = 0; oy < g.out_height; ++oy) {
      for (int64_t ox = 0; ox < g.out_width; ++ox, row += cols) {
        const float* col = row;
        for (int64_t c = 0; c < in_; ++c) {
          float* plane = image + c * g.height * g.width;
          for (int64_t ky = 0; ky < k; ++ky) {
            const int64_t iy = oy * s - pad + ky;
            for (int64_t kx = 0; kx < k; ++kx, ++col) {
              const int64_t ix = ox * s - pad + kx;
              if (iy >= 0 && iy < g.height && ix >= 0 && ix < g.width) plane[iy * g.width + ix] += *col;
            }
          }
        }
      }
    }
  }
  ctx.save("grad_rows", grad_rows);
  return grad_input;
}

void Conv2d::backward_weight(SavedContext& ctx) {
  const Tensor& input = ctx.get("input");
  const Tensor& grad_rows = ctx.get("grad_rows");
  const Geometry g = saved_geometry(ctx);
  if (is_cuda(input)) {
    cuda_backend().conv2d_backward_weight(input, grad_rows, device_geometry(g), weight_.grad,
                                          options_.bias ? bias_.grad : Tensor());
    ctx.clear();
    return;
  }
  const int64_t rows = g.batch * g.out_height * g.out_width;
  const int64_t cols = in_ * options_.kernel * options_.kernel;
  Tensor patches;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    patches = Tensor::empty({rows, cols});
  }
  im2col(input.f32(), g, patches.f32());
  cpu::gemm(true, false, out_, cols, rows, 1.0f, grad_rows.f32(), patches.f32(), 1.0f, weight_.grad.f32());
  if (options_.bias) cpu::accumulate_column_sums(rows, out_, grad_rows.f32(), bias_.grad.f32());
  ctx.clear();
}

}  // namespace pf
