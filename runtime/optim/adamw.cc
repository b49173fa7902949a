#include "runtime/optim/adamw.h"

#include "runtime/optim/cpu_update.h"
#include "runtime/optim/cuda_optim.h"

namespace pf {

void AdamW::update(Parameter& param, int64_t step) {
  if (param.value.device().kind != DeviceKind::kCpu) {
    gpu::adamw_update(param, slot(param, "exp_avg"), slot(param, "exp_avg_sq"), config_, step);
    return;
  }
  cpu::adamw_update(param.value.numel(), param.value.f32(), param.grad.f32(), slot(param, "exp_avg").f32(),
                    slot(param, "exp_avg_sq").f32(), config_, config_.lr, step);
}

}  // namespace pf
