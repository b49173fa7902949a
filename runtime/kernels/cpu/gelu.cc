#include "runtime/kernels/cpu/gelu.h"

namespace pf::cpu {

void gelu_forward(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu(x[i]);
}

void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = gelu_grad(x[i], dy[i]);
}

void bias_gelu_forward(int64_t rows, int64_t cols, const float* bias, float* pre, float* post) {
  for (int64_t r = 0; r < rows; ++r) {
    float* p = pre + r * cols;
    float* q = post + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
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
    for (int64_t c = 0; c < cols; ++c) {
      const float g = gelu_grad(x[at + c], dy[at + c]);
      dx[at + c] = g;
      column_sums[c] += g;
    }
  }
}

}  // namespace pf::cpu
