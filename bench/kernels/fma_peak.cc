// The single-thread float FMA peak of this core: independent fused multiply-adds on 8-float (AVX2)
// and, where the CPU has AVX-512, 16-float registers, 12 chains each (more than latency x pipes on
// current x86 cores), best of --rounds. The ceiling any matrix product reaches on one thread;
// bench/peer/run.py compares both sides' steps with it. Prints one JSON object:
//   {"fma_peak_gflops": best of the two, "avx2_gflops": ..., "avx512_gflops": ... or null}
//   bazel run -c opt //bench/kernels:fma_peak -- [--rounds 5]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

namespace {

constexpr int kChains = 12;
constexpr long kIterations = 20'000'000;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Each function returns GFLOP/s and folds its registers into `sink`, so nothing is optimised away.
__attribute__((target("avx2,fma"))) double avx2_rate(float* sink) {
  __m256 acc[kChains];
  const __m256 mul = _mm256_set1_ps(0.9999999f), add = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const auto start = std::chrono::steady_clock::now();
  for (long it = 0; it < kIterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
  const double s = seconds_since(start);
  for (int i = 0; i < kChains; ++i) *sink += _mm256_cvtss_f32(acc[i]);
  return 2.0 * 8 * kChains * static_cast<double>(kIterations) / s * 1e-9;
}

__attribute__((target("avx512f"))) double avx512_rate(float* sink) {
  __m512 acc[kChains];
  const __m512 mul = _mm512_set1_ps(0.9999999f), add = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const auto start = std::chrono::steady_clock::now();
  for (long it = 0; it < kIterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
  const double s = seconds_since(start);
  for (int i = 0; i < kChains; ++i) *sink += _mm512_reduce_add_ps(acc[i]);
  return 2.0 * 16 * kChains * static_cast<double>(kIterations) / s * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    if (flag == "--rounds" && v >= 1 && v <= 100) {
      rounds = v;
    } else {
      std::fprintf(stderr, "fma_peak: bad option %s (--rounds 1..100)\n", argv[i]);
      return 2;
    }
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "fma_peak: this CPU has no AVX2 + FMA\n");
    return 1;
  }
  const bool has_avx512 = __builtin_cpu_supports("avx512f");
  float sink = 0;
  double avx2 = 0, avx512 = 0;
  for (int r = 0; r < rounds; ++r) {
    avx2 = std::max(avx2, avx2_rate(&sink));
    if (has_avx512) avx512 = std::max(avx512, avx512_rate(&sink));
  }
  nlohmann::json out = {{"fma_peak_gflops", std::max(avx2, avx512)},
                        {"avx2_gflops", avx2},
                        {"avx512_gflops", has_avx512 ? nlohmann::json(avx512) : nlohmann::json()},
                        {"rounds", rounds},
                        {"sink", sink}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
