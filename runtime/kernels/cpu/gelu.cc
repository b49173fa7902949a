#include "runtime/kernels/cpu/gelu.h"

#include "runtime/kernels/cpu/fast_math_lanes.h"

PF_VEC8_NO_PSABI_WARNING

namespace pf::cpu {

void gelu_forward(int64_t n, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, gelu_lanes(load8(x + i)));
  for (; i < n; ++i) y[i] = gelu(x[i]);
}

void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dx + i, gelu_grad_lanes(load8(x + i), load8(dy + i)));
  for (; i < n; ++i) dx[i] = gelu_grad(x[i], dy[i]);
}

void bias_gelu_forward(int64_t rows, int64_t cols, const float* bias, float* pre, float* post) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = pre + r * cols;
    float* q = post + r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const v8f v = load8(p + c) + load8(bias + c);
      store8(p + c, v);
      store8(q + c, gelu_lanes(v));
    }
    for (; c < cols; ++c) {
      const float v = p[c] + bias[c];
      p[c] = v;
      q[c] = gelu(v);
    }
  }
}

void gelu_backward_column_sums(int64_t rows, int64_t cols, const float* x, const float* dy, float* dx,
                               float* column_sums) {
  for (int64_t c = 0; c < cols; ++c) column_sums[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = r * cols;
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) {
      const v8f g = gelu_grad_lanes(load8(x + at + c), load8(dy + at + c));
      store8(dx + at + c, g);
      store8(column_sums + c, load8(column_sums + c) + g);
    }
    for (; c < cols; ++c) {
      const float g = gelu_grad(x[at + c], dy[at + c]);
      dx[at + c] = g;
      column_sums[c] += g;
    }
  }
}

}  // namespace pf::cpu
