#include "runtime/kernels/cpu/blas.h"

#include <cblas.h>
#include <omp.h>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/openblas_kernels.h"

namespace pf::cpu {

namespace {

// When the library loads, after OpenBLAS's own initialisation (a dependency's constructors run
// first): OpenBLAS's generic fallback kernels replaced where the CPU can do better
// (openblas_kernels.h).
__attribute__((constructor)) void choose_blas_kernels_at_load() { choose_blas_kernels_again_if_generic(); }

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          const float* b, float beta, float* c) {
  if (m == 0 || n == 0) return;
  const int lda = static_cast<int>(trans_a ? m : k);
  const int ldb = static_cast<int>(trans_b ? k : n);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, lda, b, ldb,
              beta, c, static_cast<int>(n));
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void set_blas_threads_for_this_thread(int threads) {
  PF_CHECK_ARG(threads >= 1, "blas threads must be >= 1, got ", threads);
  omp_set_num_threads(threads);
}

int blas_threads_for_this_thread() { return omp_get_max_threads(); }

}  // namespace pf::cpu
