// Row-broadcast and element-wise passes over row-major [rows, cols] matrices on the CPU: what a
// GEMM's output is initialised with before a beta = 1 accumulation (a bias, or a residual plus a
// bias), and the bias gradient's column sums. Plain loops GCC vectorises; sums in row order.
#pragma once

#include <cstdint>

namespace pf::cpu {

// out[r, c] = row[c].
void broadcast_rows(int64_t rows, int64_t cols, const float* row, float* out);
// out[r, c] = x[r, c] + row[c].
void add_broadcast_rows(int64_t rows, int64_t cols, const float* x, const float* row, float* out);
// out[i] = a[i] + b[i].
void add(int64_t n, const float* a, const float* b, float* out);
// sums[c] += x[r, c] for r = 0, 1, ... in order.
void accumulate_column_sums(int64_t rows, int64_t cols, const float* x, float* sums);

}  // namespace pf::cpu
