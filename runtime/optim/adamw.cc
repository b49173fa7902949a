#include "runtime/optim/adamw.h"

#include <cmath>

#include "runtime/optim/cuda_optim.h"

namespace pf {

void AdamW::update(Parameter& param, int64_t step) {
  if (param.value.device().kind != DeviceKind::kCpu) {
    gpu::adamw_update(param, slot(param, "exp_avg"), slot(param, "exp_avg_sq"), config_, step);
    return;
  }
  // Four distinct buffers; with __restrict and without errno from sqrt (this library's copts:
  // -fno-math-errno) GCC vectorises the loop, element by element as written, so the results are
  // those of the scalar loop.
  float* __restrict w = param.value.f32();
  const float* __restrict g = param.grad.f32();
  float* __restrict m = slot(param, "exp_avg").f32();
  float* __restrict v = slot(param, "exp_avg_sq").f32();
  const int64_t n = param.value.numel();
  const float lr = config_.lr, b1 = config_.beta1, b2 = config_.beta2, eps = config_.eps;
  const float decay = 1.0f - lr * config_.weight_decay;
  const float bias1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(step)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(step)));
  const float step_size = lr / bias1;
  const float bias2_sqrt = std::sqrt(bias2);
  for (int64_t i = 0; i < n; ++i) {
    w[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
  }
}

}  // namespace pf
