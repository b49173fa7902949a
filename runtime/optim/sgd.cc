#include "runtime/optim/sgd.h"

#include "runtime/optim/cuda_optim.h"

namespace pf {

void Sgd::update(Parameter& param, int64_t step) {
  if (param.value.device().kind != DeviceKind::kCpu) {
    gpu::sgd_update(param, config_.momentum == 0.0f ? Tensor() : slot(param, "momentum"), config_, step);
    return;
  }
  float* w = param.value.f32();
  const float* g = param.grad.f32();
  const int64_t n = param.value.numel();
  const float lr = config_.lr, wd = config_.weight_decay, mu = config_.momentum;
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    return;
  }
  float* buf = slot(param, "momentum").f32();
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    buf[i] = step == 1 ? d : mu * buf[i] + d;
    w[i] -= lr * buf[i];
  }
}

}  // namespace pf
