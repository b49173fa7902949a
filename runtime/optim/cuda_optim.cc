#include "runtime/optim/cuda_optim.h"

#include "runtime/backend/cuda_backend.h"

namespace pf::gpu {

void sgd_update(const Parameter& param, const Tensor& buf, const OptimizerConfig& config, int64_t step) {
  cuda_backend().sgd_update(param.value, param.grad, buf, config.lr, config.weight_decay, config.momentum, step == 1);
}

void adamw_update(const Parameter& param, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const OptimizerConfig& config, int64_t step) {
  const AdamWHyperparameters hyper{config.lr, config.beta1, config.beta2, config.eps, config.weight_decay};
  cuda_backend().adamw_update(param.value, param.grad, exp_avg, exp_avg_sq, hyper, step);
}

double grad_squared_norm(const Parameter& param) { return cuda_backend().squared_norm(param.grad); }

void scale_grad(const Parameter& param, float scale) { cuda_backend().scale_in_place(param.grad, scale); }

}  // namespace pf::gpu
