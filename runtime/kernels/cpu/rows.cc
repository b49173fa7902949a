#include "runtime/kernels/cpu/rows.h"

namespace pf::cpu {

void broadcast_rows(int64_t rows, int64_t cols, const float* row, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = row[c];
}

void add_broadcast_rows(int64_t rows, int64_t cols, const float* x, const float* row, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = x[r * cols + c] + row[c];
}

void add(int64_t n, const float* a, const float* b, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void accumulate_column_sums(int64_t rows, int64_t cols, const float* x, float* sums) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) sums[c] += x[r * cols + c];
}

}  // namespace pf::cpu
