#include "runtime/kernels/cpu/layer_norm.h"

#include <cmath>

#include "runtime/kernels/cpu/vec8.h"

PF_VEC8_NO_PSABI_WARNING

namespace pf::cpu {

namespace {

// Welford state of `count` values.
struct Moments {
  float count = 0.0f, mean = 0.0f, m2 = 0.0f;
};

// Chan et al.'s pairwise merge.
Moments merge(const Moments& a, const Moments& b) {
  if (a.count == 0.0f) return b;
  if (b.count == 0.0f) return a;
  const float n = a.count + b.count;
  const float delta = b.mean - a.mean;
  const float wb = b.count / n;
  return {n, a.mean + delta * wb, a.m2 + b.m2 + delta * delta * a.count * wb};
}

inline v8f load_sum(const float* v, const float* skip, float* sum, int64_t i) {
  if (skip == nullptr) return load8(v + i);
  const v8f s = load8(v + i) + load8(skip + i);
  store8(sum + i, s);
  return s;
}

}  // namespace

void row_moments(int64_t dim, const float* v, const float* skip, float* sum, float* mean, float* m2) {
  // Two 8-lane Welford streams over blocks of 16 (two independent dependency chains).
  v8f mean0 = splat8(0.0f), m20 = mean0, mean1 = mean0, m21 = mean0;
  const int64_t steps = dim / 16;
  for (int64_t s = 0; s < steps; ++s) {
    const v8f inv = splat8(1.0f / static_cast<float>(s + 1));
    const v8f a = load_sum(v, skip, sum, 16 * s);
    const v8f b = load_sum(v, skip, sum, 16 * s + 8);
    const v8f da = a - mean0, db = b - mean1;
    mean0 += da * inv;
    mean1 += db * inv;
    m20 += da * (a - mean0);
    m21 += db * (b - mean1);
  }
  Moments total;
  if (steps > 0) {
    // Merge equal-count lanes: stream 0 with stream 1, then lane j with lane j + 4, j + 2, j + 1.
    const float n = static_cast<float>(steps);
    Moments lane[8];
    for (int j = 0; j < 8; ++j) lane[j] = merge({n, mean0[j], m20[j]}, {n, mean1[j], m21[j]});
    for (int width = 4; width >= 1; width /= 2)
      for (int j = 0; j < width; ++j) lane[j] = merge(lane[j], lane[j + width]);
    total = lane[0];
  }
  Moments tail;
  for (int64_t i = 16 * steps; i < dim; ++i) {
    float x = v[i];
    if (skip != nullptr) {
      x += skip[i];
      sum[i] = x;
    }
    tail.count += 1.0f;
    const float d = x - tail.mean;
    tail.mean += d / tail.count;
    tail.m2 += d * (x - tail.mean);
  }
  total = merge(total, tail);
  *mean = total.mean;
  *m2 = total.m2;
}

void layer_norm_forward(int64_t rows, int64_t dim, const float* x, const float* skip, float* sum,
                        const float* weight, const float* bias, float eps, float* y, float* xhat,
                        float* rstd) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * dim;
    float mean, m2;
    row_moments(dim, x + at, skip ? skip + at : nullptr, skip ? sum + at : nullptr, &mean, &m2);
    const float s = 1.0f / std::sqrt(m2 * inv_dim + eps);
    const float* vr = (skip ? sum : x) + at;
    float* xhr = xhat + at;
    float* yr = y + at;
    for (int64_t i = 0; i < dim; ++i) {
      xhr[i] = (vr[i] - mean) * s;
      yr[i] = xhr[i] * weight[i] + bias[i];
    }
    rstd[r] = s;
  }
}

void row_grad_sums(int64_t dim, const float* dy, const float* weight, const float* xhat, float* sum_d,
                   float* sum_d_xhat) {
  v8f d0 = splat8(0.0f), d1 = d0, dx0 = d0, dx1 = d0;
  const int64_t steps = dim / 16;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t i = 16 * s;
    const v8f a = load8(dy + i) * load8(weight + i);
    const v8f b = load8(dy + i + 8) * load8(weight + i + 8);
    d0 += a;
    d1 += b;
    dx0 += a * load8(xhat + i);
    dx1 += b * load8(xhat + i + 8);
  }
  float sd = sum8(d0 + d1), sdx = sum8(dx0 + dx1);
  for (int64_t i = 16 * steps; i < dim; ++i) {
    const float d = dy[i] * weight[i];
    sd += d;
    sdx += d * xhat[i];
  }
  *sum_d = sd;
  *sum_d_xhat = sdx;
}

void layer_norm_backward_input(int64_t rows, int64_t dim, const float* xhat, const float* rstd,
                               const float* weight, const float* dy, const float* skip_grad, float* dx) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * dim;
    const float* xhr = xhat + at;
    const float* dyr = dy + at;
    float* dxr = dx + at;
    float sum_d, sum_d_xhat;
    row_grad_sums(dim, dyr, weight, xhr, &sum_d, &sum_d_xhat);
    const float mean_d = sum_d * inv_dim, mean_dx = sum_d_xhat * inv_dim, s = rstd[r];
    if (skip_grad == nullptr) {
      for (int64_t i = 0; i < dim; ++i) dxr[i] = s * (dyr[i] * weight[i] - mean_d - xhr[i] * mean_dx);
    } else {
      const float* sg = skip_grad + at;
      for (int64_t i = 0; i < dim; ++i)
        dxr[i] = sg[i] + s * (dyr[i] * weight[i] - mean_d - xhr[i] * mean_dx);
    }
  }
}

void layer_norm_backward_weight(int64_t rows, int64_t dim, const float* xhat, const float* dy,
                                float* dweight, float* dbias) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xhr = xhat + r * dim;
    const float* dyr = dy + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      dweight[i] += dyr[i] * xhr[i];
      dbias[i] += dyr[i];
    }
  }
}

}  // namespace pf::cpu
