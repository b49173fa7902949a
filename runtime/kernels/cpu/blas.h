// Matrix products through OpenBLAS (cblas), row-major. OpenBLAS is the OpenMP build, so the thread
// count is a property of the calling thread: each stage worker sets its own.
#pragma once

#include <cstdint>

namespace pf::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op = transpose when the flag is set.
// A is [M,K] (or [K,M] when trans_a), B is [K,N] (or [N,K] when trans_b).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c);
// The same on sub-matrices: lda, ldb and ldc are the row strides of A, B and C as stored (e.g. one
// head's columns inside a wider row).
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// BLAS threads used by calls made from this thread (>= 1).
void set_blas_threads_for_this_thread(int threads);
int blas_threads_for_this_thread();

}  // namespace pf::cpu
