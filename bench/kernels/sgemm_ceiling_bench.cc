// How much faster than OpenBLAS a hand-written single-thread SGEMM could run the GPT block's
// products on this CPU (bench/peer: at d_model 512 the step is ~88% SGEMM, so the sequential ratio
// against PyTorch is bounded by the GEMM library). Three ways, alternating, best of `--rounds`:
//   openblas  pf::cpu::gemm (cblas_sgemm, one thread);
//   packed    a GotoBLAS-style product written here: a 6 x 16 AVX2/FMA micro-kernel over panels
//             packed per call (k blocks of 256, row blocks of 144), C prefetched per tile;
//   prepacked the same micro-kernel over operands packed once beforehand, so no packing at all
//             is timed: the ceiling for any scheme that packs weights once per step.
// packed and prepacked run the same FMAs in the same order, so their results are checked bitwise
// equal; both against OpenBLAS within rounding. Prints one JSON object.
// --openblas-only 1 times OpenBLAS alone (bench/peer/run.py: the rate its bound on each row uses).
//   bazel run -c opt //bench/kernels:sgemm_ceiling_bench -- [--d-model 512] [--tokens 512] [--rounds 7]
//       [--openblas-only 1]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/gemm_shapes.h"
#include "runtime/kernels/cpu/blas.h"

namespace {

constexpr int kMR = 6, kNR = 16;
constexpr int64_t kKC = 256, kMC = 144;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// Rows [i0, i0 + mc) and depth [k0, k0 + kc) of op(A) as panels of kMR rows, depth-major, zero rows
// past the end.
void pack_a(bool trans, const float* a, int64_t lda, int64_t i0, int64_t mc, int64_t k0, int64_t kc, float* out) {
  for (int64_t ip = 0; ip < mc; ip += kMR, out += kMR * kc) {
    const int rows = static_cast<int>(std::min<int64_t>(kMR, mc - ip));
    if (trans) {
      for (int64_t k = 0; k < kc; ++k)
        for (int r = 0; r < rows; ++r) out[k * kMR + r] = a[(k0 + k) * lda + i0 + ip + r];
    } else {
      for (int r = 0; r < rows; ++r) {
        const float* src = a + (i0 + ip + r) * lda + k0;
        for (int64_t k = 0; k < kc; ++k) out[k * kMR + r] = src[k];
      }
    }
    for (int64_t k = 0; k < kc; ++k)
      for (int r = rows; r < kMR; ++r) out[k * kMR + r] = 0.0f;
  }
}

// Depth [k0, k0 + kc) and columns [0, n) of op(B) as panels of kNR columns, zero columns past n.
void pack_b(bool trans, const float* b, int64_t ldb, int64_t n, int64_t k0, int64_t kc, float* out) {
  for (int64_t jp = 0; jp < n; jp += kNR, out += kNR * kc) {
    const int cols = static_cast<int>(std::min<int64_t>(kNR, n - jp));
    if (trans) {
      for (int c = 0; c < cols; ++c) {
        const float* src = b + (jp + c) * ldb + k0;
        for (int64_t k = 0; k < kc; ++k) out[k * kNR + c] = src[k];
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) std::memcpy(out + k * kNR, b + (k0 + k) * ldb + jp, sizeof(float) * cols);
    }
    for (int64_t k = 0; k < kc; ++k)
      for (int c = cols; c < kNR; ++c) out[k * kNR + c] = 0.0f;
  }
}

// C tile (rows x cols of a 6 x 16) = acc (accumulate: C + acc) over one depth block.
__attribute__((target("avx2,fma"))) void micro_kernel(int64_t kc, const float* __restrict a,
                                                       const float* __restrict b, float* c, int64_t ldc, int rows,
                                                       int cols, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNR - 1), _MM_HINT_T0);
  }
  // Twelve named accumulators: an array of them is spilled to the stack by GCC.
  __m256 c0a = _mm256_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a, c3b = c0a,
         c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
#define PF_ROW(r, lo, hi)                            \
  x = _mm256_broadcast_ss(a + (r));                  \
  lo = _mm256_fmadd_ps(x, b0, lo);                   \
  hi = _mm256_fmadd_ps(x, b1, hi)
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a += kMR, b += kNR) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x;
    PF_ROW(0, c0a, c0b);
    PF_ROW(1, c1a, c1b);
    PF_ROW(2, c2a, c2b);
    PF_ROW(3, c3a, c3b);
    PF_ROW(4, c4a, c4b);
    PF_ROW(5, c5a, c5b);
  }
#undef PF_ROW
  alignas(32) float tile[kMR * kNR];
  const __m256 rows_out[kMR * 2] = {c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b};
  for (int i = 0; i < kMR * 2; ++i) _mm256_store_ps(tile + 8 * i, rows_out[i]);
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    if (cols == kNR) {
      for (int h = 0; h < 2; ++h) {
        const __m256 t = _mm256_load_ps(tile + r * kNR + 8 * h);
        _mm256_storeu_ps(cr + 8 * h, accumulate ? _mm256_add_ps(_mm256_loadu_ps(cr + 8 * h), t) : t);
      }
    } else {
      for (int j = 0; j < cols; ++j) cr[j] = accumulate ? cr[j] + tile[r * kNR + j] : tile[r * kNR + j];
    }
  }
}

// C = op(A) op(B) (beta 0) or C += op(A) op(B) (beta 1). `packed_a(k0, kc, i0, mc)` and `packed_b(k0, kc)` give
// the panels of a depth block: packed here per call, or looked up in buffers packed beforehand.
template <typename PackedA, typename PackedB>
void product(int64_t m, int64_t n, int64_t k, float beta, float* c, const PackedA& packed_a,
             const PackedB& packed_b) {
  for (int64_t k0 = 0; k0 < k; k0 += kKC) {
    const int64_t kc = std::min(kKC, k - k0);
    const float* pb = packed_b(k0, kc);
    const bool accumulate = k0 > 0 || beta == 1.0f;
    for (int64_t i0 = 0; i0 < m; i0 += kMC) {
      const int64_t mc = std::min(kMC, m - i0);
      const float* pa = packed_a(k0, kc, i0, mc);
      for (int64_t jr = 0; jr < n; jr += kNR) {
        for (int64_t ir = 0; ir < mc; ir += kMR) {
          micro_kernel(kc, pa + ir * kc, pb + jr * kc, c + (i0 + ir) * n + jr, n,
                       static_cast<int>(std::min<int64_t>(kMR, mc - ir)),
                       static_cast<int>(std::min<int64_t>(kNR, n - jr)), accumulate);
        }
      }
    }
  }
}

struct AlignedBuffer {
  explicit AlignedBuffer(int64_t floats)
      : p(static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(round_up(floats, 16)) * sizeof(float)))) {}
  ~AlignedBuffer() { std::free(p); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  float* p;
};

struct Case {
  pf::bench::GemmShape shape;
  std::vector<float> a, b, c_init;
  int64_t lda, ldb;
};


}  // namespace

int main(int argc, char** argv) {
  int64_t d = 512, tokens = 512;
  int rounds = 7;
  bool openblas_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--d-model" && v >= 16 && v <= 4096) d = v;
    else if (flag == "--tokens" && v >= 16 && v <= 8192) tokens = v;
    else if (flag == "--rounds" && v >= 1 && v <= 100) rounds = static_cast<int>(v);
    else if (flag == "--openblas-only" && (v == 0 || v == 1)) openblas_only = v == 1;
    else {
      std::fprintf(stderr, "sgemm_ceiling_bench: bad option %s %s (--d-model 16..4096, --tokens 16..8192, "
                   "--rounds 1..100, --openblas-only 0|1)\n", argv[i], argv[i + 1]);
      return 2;
    }
  }
  pf::cpu::set_blas_threads_for_this_thread(1);
  std::vector<Case> cases;
  for (const auto& s : pf::bench::block_linear_gemms("", d, tokens)) {
    Case c{s, {}, {}, {}, s.trans_a ? s.m : s.k, s.trans_b ? s.k : s.n};
    c.a.resize(static_cast<size_t>(s.m * s.k));
    c.b.resize(static_cast<size_t>(s.k * s.n));
    c.c_init.resize(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < c.a.size(); ++i) c.a[i] = std::sin(0.37f * static_cast<float>(i % 9973));
    for (size_t i = 0; i < c.b.size(); ++i) c.b[i] = std::cos(0.21f * static_cast<float>(i % 9967));
    for (size_t i = 0; i < c.c_init.size(); ++i) c.c_init[i] = 0.1f * std::sin(0.1f * static_cast<float>(i % 9949));
    cases.push_back(std::move(c));
  }

  nlohmann::json rows = nlohmann::json::array();
  double total[3] = {0, 0, 0};
  bool bitwise = true;
  double worst_relative = 0;
  for (const Case& cs : cases) {
    const auto& s = cs.shape;
    const int64_t kblocks = (s.k + kKC - 1) / kKC;
    AlignedBuffer scratch_a(kMC * kKC), scratch_b(round_up(s.n, kNR) * kKC);
    AlignedBuffer all_a(kblocks * round_up(s.m, kMR) * kKC), all_b(kblocks * round_up(s.n, kNR) * kKC);
    // Operands packed beforehand: depth block k0 of A at all_a + k0 * round_up(m), of B likewise.
    for (int64_t k0 = 0; k0 < s.k; k0 += kKC) {
      const int64_t kc = std::min(kKC, s.k - k0);
      for (int64_t i0 = 0; i0 < s.m; i0 += kMC)
        pack_a(s.trans_a, cs.a.data(), cs.lda, i0, std::min(kMC, s.m - i0), k0, kc,
               all_a.p + k0 * round_up(s.m, kMR) + i0 * kc);
      pack_b(s.trans_b, cs.b.data(), cs.ldb, s.n, k0, kc, all_b.p + k0 * round_up(s.n, kNR));
    }
    std::vector<float> c0 = cs.c_init, c1 = cs.c_init, c2 = cs.c_init;
    auto run_openblas = [&] {
      pf::cpu::gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, cs.a.data(), cs.lda, cs.b.data(), cs.ldb, s.beta,
                    c0.data(), s.n);
    };
    auto run_packed = [&] {
      product(
          s.m, s.n, s.k, s.beta, c1.data(),
          [&](int64_t k0, int64_t kc, int64_t i0, int64_t mc) {
            pack_a(s.trans_a, cs.a.data(), cs.lda, i0, mc, k0, kc, scratch_a.p);
            return scratch_a.p;
          },
          [&](int64_t k0, int64_t kc) {
            pack_b(s.trans_b, cs.b.data(), cs.ldb, s.n, k0, kc, scratch_b.p);
            return scratch_b.p;
          });
    };
    auto run_prepacked = [&] {
      product(
          s.m, s.n, s.k, s.beta, c2.data(),
          [&](int64_t k0, int64_t kc, int64_t i0, int64_t) { return all_a.p + k0 * round_up(s.m, kMR) + i0 * kc; },
          [&](int64_t k0, int64_t) { return all_b.p + k0 * round_up(s.n, kNR); });
    };
    const int variants = openblas_only ? 1 : 3;
    if (!openblas_only) {  // one call each from the same C: the checks
      run_openblas();
      run_packed();
      run_prepacked();
      double largest = 0, diff = 0;
      for (size_t i = 0; i < c0.size(); ++i) {
        largest = std::max(largest, static_cast<double>(std::fabs(c0[i])));
        diff = std::max(diff, static_cast<double>(std::fabs(c0[i] - c1[i])));
      }
      bitwise = bitwise && std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)) == 0;
      worst_relative = std::max(worst_relative, diff / largest);
    }
    // Timed: 3 calls per sample (beta 1 shapes keep accumulating; the time does not depend on C's values).
    double best[3] = {1e30, 1e30, 1e30};
    const std::function<void()> runs[3] = {run_openblas, run_packed, run_prepacked};
    for (int r = 0; r < rounds; ++r) {
      for (int w = 0; w < variants; ++w) {
        const int which = r % 2 ? variants - 1 - w : w;  // alternate the order
        best[which] = std::min(best[which], pf::bench::seconds_of([&] {
                                 for (int it = 0; it < 3; ++it) runs[which]();
                               }) / 3);
      }
    }
    for (int w = 0; w < variants; ++w) total[w] += best[w];
    nlohmann::json row = {{"shape", s.name}, {"m", s.m}, {"n", s.n}, {"k", s.k},
                          {"openblas_gflops", s.flops() / best[0] * 1e-9}};
    if (!openblas_only) {
      row["packed_gflops"] = s.flops() / best[1] * 1e-9;
      row["prepacked_gflops"] = s.flops() / best[2] * 1e-9;
    }
    rows.push_back(row);
  }
  nlohmann::json out = {{"d_model", d},
                        {"tokens", tokens},
                        {"rounds", rounds},
                        {"shapes", rows},
                        {"openblas_block_seconds", total[0]}};
  if (!openblas_only) {
    out["packed_over_openblas"] = total[0] / total[1];
    out["prepacked_over_openblas"] = total[0] / total[2];
    out["packed_equals_prepacked_bitwise"] = bitwise;
    out["packed_vs_openblas_max_relative_difference"] = worst_relative;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return bitwise ? 0 : 1;
}
