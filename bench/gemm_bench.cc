// GFLOP/s of pf::cpu::gemm (OpenBLAS, one thread) at the matrix shapes one GPT training step runs:
// for every Linear of a block (attn.qkv, attn.proj, mlp.fc, mlp.proj) and the head, the forward
// product and the two backward ones (B: input gradient, W: weight gradient, accumulated), plus the
// per-head attention products; at the default small GPT (d_model 64) and at d_model 256, with
// 8 rows x 64 tokens = 512 tokens per micro-batch.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/gemm_shapes.h"
#include "runtime/kernels/cpu/blas.h"

namespace {

constexpr int64_t kTokens = 8 * 64;  // rows x seq_len of one micro-batch
constexpr int64_t kSeqLen = 64;
constexpr int64_t kHeads = 4;
constexpr int64_t kVocab = 86;  // the distinct bytes of the default text (the licence texts)

using pf::bench::GemmShape;

std::vector<GemmShape> gpt_shapes(int64_t d) {
  const std::string p = "d" + std::to_string(d) + "/";
  std::vector<GemmShape> s = pf::bench::block_linear_gemms(p, d, kTokens);
  pf::bench::add_linear(s, p + "head", kTokens, d, kVocab);
  for (GemmShape& g : pf::bench::attention_head_gemms(p, kSeqLen, d / kHeads)) s.push_back(g);
  return s;
}

void fill(std::vector<float>& v, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>((x >> 8) & 0xFFFF) / 65536.0f - 0.5f;
  }
}

void run_gemm(benchmark::State& state, const GemmShape& g) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  std::vector<float> a(static_cast<size_t>(g.m * g.k)), b(static_cast<size_t>(g.k * g.n)),
      c(static_cast<size_t>(g.m * g.n));
  fill(a, 1);
  fill(b, 2);
  fill(c, 3);
  for (auto _ : state) {
    pf::cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a.data(), b.data(), g.beta, c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(g.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("M=" + std::to_string(g.m) + " N=" + std::to_string(g.n) + " K=" + std::to_string(g.k) +
                 (g.trans_a ? " At" : "") + (g.trans_b ? " Bt" : "") + " blas_threads=1");
}

const bool registered = [] {
  for (int64_t d : {64, 256}) {
    for (const GemmShape& g : gpt_shapes(d)) {
      benchmark::RegisterBenchmark(("gemm/" + g.name).c_str(), [g](benchmark::State& s) {
        run_gemm(s, g);
      })->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

}  // namespace
