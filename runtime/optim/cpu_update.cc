#include "runtime/optim/cpu_update.h"

#include <cmath>

namespace pf::cpu {

AdamWBias adamw_bias(const OptimizerConfig& config, int64_t step) {
  AdamWBias b;
  b.bias1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(config.beta1), static_cast<double>(step)));
  const float bias2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(config.beta2), static_cast<double>(step)));
  b.bias2_sqrt = std::sqrt(bias2);
  return b;
}

void adamw_update(int64_t n, float* w, const float* g, float* m, float* v, const OptimizerConfig& config, float lr,
                  int64_t step) {
  adamw_update(n, w, g, m, v, config, lr, adamw_bias(config, step));
}

void adamw_update(int64_t n, float* w_in, const float* g_in, float* m_in, float* v_in, const OptimizerConfig& config,
                  float lr, const AdamWBias& bias) {
  // Four distinct buffers; with __restrict and without errno from sqrt (this library's copts:
  // -fno-math-errno) GCC vectorises the loop, element by element as written, so the results are
  // those of the scalar loop.
  float* __restrict w = w_in;
  const float* __restrict g = g_in;
  float* __restrict m = m_in;
  float* __restrict v = v_in;
  const float b1 = config.beta1, b2 = config.beta2, eps = config.eps;
  const float decay = 1.0f - lr * config.weight_decay;
  const float step_size = lr / bias.bias1;
  const float bias2_sqrt = bias.bias2_sqrt;
  for (int64_t i = 0; i < n; ++i) {
    w[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    w[i] -= step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + eps);
  }
}

void sgd_update(int64_t n, float* w, const float* g, float* buf, const OptimizerConfig& config, float lr,
                int64_t step) {
  const float wd = config.weight_decay, mu = config.momentum;
  if (mu == 0.0f) {
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    buf[i] = step == 1 ? d : mu * buf[i] + d;
    w[i] -= lr * buf[i];
  }
}

}  // namespace pf::cpu
