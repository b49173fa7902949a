// LayerNorm over the rows of a [rows, dim] matrix on the CPU, each row read once from memory (it
// stays in L1 between the statistics and the output), reductions vectorised in a fixed order
// (vec8.h), so results are deterministic for a given build. The layer is runtime/layers/layer_norm.h;
// the earlier unfused loops are in runtime/kernels/cpu/reference for tests and benchmarks.
//
// Forward: y = xhat * weight + bias, xhat = (v - mean) * rstd, rstd = 1 / sqrt(m2 / dim + eps), v a
// row of x (plus a row of `skip` when skip is not null: a residual add folded into the same pass,
// v then written to `sum`). Mean and m2 (the sum of squared deviations) come from one pass of
// Welford updates in 16 lanes, merged pairwise in a fixed order (Chan et al.): no cancellation
// however large the mean is against the spread.
#pragma once

#include <cstdint>

namespace pf::cpu {

// Mean and sum of squared deviations of v[0..dim) (+ skip[0..dim) when skip is not null; the
// sums then go to sum[0..dim)). dim >= 1.
void row_moments(int64_t dim, const float* v, const float* skip, float* sum, float* mean, float* m2);

void layer_norm_forward(int64_t rows, int64_t dim, const float* x, const float* skip, float* sum,
                        const float* weight, const float* bias, float eps, float* y, float* xhat,
                        float* rstd);

// sum_d = sum_i dy[i] * weight[i] and sum_d_xhat = sum_i dy[i] * weight[i] * xhat[i] of one row.
void row_grad_sums(int64_t dim, const float* dy, const float* weight, const float* xhat, float* sum_d,
                   float* sum_d_xhat);

// dx = rstd * (dy * weight - mean(dy * weight) - xhat * mean(dy * weight * xhat)) per row, plus
// skip_grad when it is not null (the gradient of a residual's skip path, folded into the pass).
void layer_norm_backward_input(int64_t rows, int64_t dim, const float* xhat, const float* rstd,
                               const float* weight, const float* dy, const float* skip_grad, float* dx);

// dweight += sum_r dy * xhat, dbias += sum_r dy, accumulated in row order.
void layer_norm_backward_weight(int64_t rows, int64_t dim, const float* xhat, const float* dy,
                                float* dweight, float* dbias);

}  // namespace pf::cpu
