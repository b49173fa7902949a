#include "runtime/layers/cross_entropy.h"

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

namespace {

// max over the row, and the sum of exp(x - max) in double.
struct RowStats {
  float max;
  double sum_exp;
};

RowStats row_stats(const float* x, int64_t classes) {
  float m = x[0];
  for (int64_t c = 1; c < classes; ++c) m = x[c] > m ? x[c] : m;
  double sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(x[c]) - m);
  return {m, sum};
}

}  // namespace

float CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets, float scale,
                                SavedContext& ctx) {
  PF_CHECK_ARG(logits.defined() && logits.dtype() == DType::kF32 && logits.rank() >= 1 &&
                   logits.dim(-1) > 0 && logits.numel() > 0,
               "cross_entropy: expected non-empty f32 logits [..., C], got ",
               logits.defined() ? dtype_name(logits.dtype()) : "undefined", " ",
               shape_to_string(logits.shape()));
  const int64_t classes = logits.dim(-1);
  const int64_t rows = logits.numel() / classes;
  PF_CHECK_ARG(targets.defined() && targets.dtype() == DType::kI32 && targets.numel() == rows,
               "cross_entropy: expected i32 targets with ", rows, " elements for logits ",
               shape_to_string(logits.shape()), ", got ",
               targets.defined() ? dtype_name(targets.dtype()) : "undefined", " ",
               shape_to_string(targets.shape()));
  PF_CHECK_ARG(std::isfinite(scale), "cross_entropy: scale must be finite, got ", scale);
  check_same_device(type(), "", "logits", logits.device(), "targets", targets.device());
  // CUDA: the targets are checked on a host copy (the kernel would turn a bad target into NaN).
  const std::vector<int32_t> host_targets = is_cuda(targets) ? cuda_backend().i32_to_host(targets) : std::vector<int32_t>();
  const int32_t* t = is_cuda(targets) ? host_targets.data() : targets.i32();
  for (int64_t r = 0; r < rows; ++r) {
    PF_CHECK_ARG(t[r] >= 0 && t[r] < classes, "cross_entropy: target ", t[r], " at row ", r,
                 " is out of range [0, ", classes, ")");
  }
  if (is_cuda(logits)) {
    ctx.save("logits", logits);
    ctx.save("targets", targets);
    ctx.save("scale", Tensor::from_vector({1}, {scale}));  // a host scalar
    return cuda_backend().cross_entropy_forward(logits, targets, scale);
  }
  const float* x = logits.f32();
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * classes;
    const RowStats s = row_stats(xr, classes);
    total += static_cast<double>(s.max) + std::log(s.sum_exp) - static_cast<double>(xr[t[r]]);
  }
  ctx.save("logits", logits);
  ctx.save("targets", targets);
  ctx.save("scale", Tensor::from_vector({1}, {scale}));
  return static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(rows));
}

Tensor CrossEntropyLoss::backward(SavedContext& ctx) {
  const Tensor logits = ctx.get("logits");
  const Tensor targets = ctx.get("targets");
  const double scale = ctx.get("scale").f32()[0];
  ctx.clear();
  if (is_cuda(logits)) return cuda_backend().cross_entropy_backward(logits, targets, static_cast<float>(scale));
  const int64_t classes = logits.dim(-1);
  const int64_t rows = logits.numel() / classes;
  const double coef = scale / static_cast<double>(rows);
  Tensor grad = Tensor::empty(logits.shape());
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* g = grad.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * classes;
    float* gr = g + r * classes;
    const RowStats s = row_stats(xr, classes);
    const double inv_sum = 1.0 / s.sum_exp;
    for (int64_t c = 0; c < classes; ++c) {
      const double p = std::exp(static_cast<double>(xr[c]) - s.max) * inv_sum;
      gr[c] = static_cast<float>(coef * (c == t[r] ? p - 1.0 : p));
    }
  }
  return grad;
}

int64_t CrossEntropyLoss::count_correct(const Tensor& logits, const Tensor& targets) const {
  // Logits on a device are read on the host (evaluation only).
  const Tensor x = logits.device().kind == DeviceKind::kCpu ? logits : logits.to_device(Device::cpu());
  const Tensor t = targets.device().kind == DeviceKind::kCpu ? targets : targets.to_device(Device::cpu());
  PF_CHECK_ARG(x.defined() && x.dtype() == DType::kF32 && x.rank() >= 1 && x.dim(-1) > 0,
               "cross_entropy: expected f32 logits [..., C] to count correct rows");
  const int64_t classes = x.dim(-1);
  const int64_t rows = x.numel() / classes;
  PF_CHECK_ARG(t.defined() && t.dtype() == DType::kI32 && t.numel() == rows, "cross_entropy: expected i32 targets with ",
               rows, " elements to count correct rows");
  const float* data = x.f32();
  const int32_t* target = t.i32();
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = data + r * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == target[r] ? 1 : 0;
  }
  return correct;
}

}  // namespace pf
