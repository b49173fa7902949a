#include "runtime/optim/sgd.h"

#include "runtime/optim/cpu_update.h"
#include "runtime/optim/cuda_optim.h"

namespace pf {

void Sgd::update(Parameter& param, int64_t step) {
  if (param.value.device().kind != DeviceKind::kCpu) {
    gpu::sgd_update(param, config_.momentum == 0.0f ? Tensor() : slot(param, "momentum"), config_, step);
    return;
  }
  cpu::sgd_update(param.value.numel(), param.value.f32(), param.grad.f32(),
                  config_.momentum == 0.0f ? nullptr : slot(param, "momentum").f32(), config_, config_.lr, step);
}

}  // namespace pf
