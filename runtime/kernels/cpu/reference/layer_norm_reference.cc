#include "runtime/kernels/cpu/reference/layer_norm_reference.h"

#include <cmath>

namespace pf::cpu::reference {

void layer_norm_forward(int64_t rows, int64_t dim, const float* x, const float* weight, const float* bias,
                        float eps, float* y, float* xhat, float* rstd) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* xhr = xhat + r * dim;
    float* yr = y + r * dim;
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const float mean = sum * inv_dim;
    float sq = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      const float c = xr[i] - mean;
      sq += c * c;
    }
    const float s = 1.0f / std::sqrt(sq * inv_dim + eps);
    for (int64_t i = 0; i < dim; ++i) {
      xhr[i] = (xr[i] - mean) * s;
      yr[i] = xhr[i] * weight[i] + bias[i];
    }
    rstd[r] = s;
  }
}

void layer_norm_backward_input(int64_t rows, int64_t dim, const float* xhat, const float* rstd,
                               const float* weight, const float* dy, float* dx) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xhr = xhat + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    float sum_d = 0.0f, sum_d_xhat = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      const float d = dyr[i] * weight[i];
      sum_d += d;
      sum_d_xhat += d * xhr[i];
    }
    const float mean_d = sum_d * inv_dim;
    const float mean_dx = sum_d_xhat * inv_dim;
    for (int64_t i = 0; i < dim; ++i) dxr[i] = rstd[r] * (dyr[i] * weight[i] - mean_d - xhr[i] * mean_dx);
  }
}

}  // namespace pf::cpu::reference
