// GFLOP/s of pf::cpu::gemm (OpenBLAS, one thread) at the matrix shapes one GPT training step runs:
// for every Linear of a block (attn.qkv, attn.proj, mlp.fc, mlp.proj) and the head, the forward
// product and the two backward ones (B: input gradient, W: weight gradient, accumulated), plus the
// per-head attention products; at the default small GPT (d_model 64) and at d_model 256, with
// 8 rows x 64 tokens = 512 tokens per micro-batch.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/cpu/blas.h"

namespace {

constexpr int64_t kTokens = 8 * 64;  // rows x seq_len of one micro-batch
constexpr int64_t kSeqLen = 64;
constexpr int64_t kHeads = 4;
constexpr int64_t kVocab = 86;  // the distinct bytes of the default text (the licence texts)

struct GemmShape {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  float beta;
};

void add_linear(std::vector<GemmShape>& out, const std::string& prefix, int64_t in, int64_t outf) {
  // Linear: y[N,out] = x[N,in] W[out,in]^T; B: dx = dy W; W: dW += dy^T x.
  out.push_back({prefix + "/fwd", false, true, kTokens, outf, in, 0.0f});
  out.push_back({prefix + "/bwd_input", false, false, kTokens, in, outf, 0.0f});
  out.push_back({prefix + "/bwd_weight", true, false, outf, in, kTokens, 1.0f});
}

std::vector<GemmShape> gpt_shapes(int64_t d) {
  std::vector<GemmShape> s;
  const std::string p = "d" + std::to_string(d) + "/";
  add_linear(s, p + "qkv", d, 3 * d);
  add_linear(s, p + "attn_proj", d, d);
  add_linear(s, p + "fc", d, 4 * d);
  add_linear(s, p + "mlp_proj", 4 * d, d);
  add_linear(s, p + "head", d, kVocab);
  // Per head and row, unfused: scores = q k^T, out = p v, and their backward
  // (cpu::attention_reference_*; the layer's fused kernel runs them in 32 x 128 blocks,
  // bench/kernels:attention_bench).
  const int64_t t = kSeqLen, hd = d / kHeads;
  s.push_back({p + "attn_scores/fwd", false, true, t, t, hd, 0.0f});
  s.push_back({p + "attn_values/fwd", false, false, t, hd, t, 0.0f});
  s.push_back({p + "attn_values/bwd_dv", true, false, t, hd, t, 0.0f});
  s.push_back({p + "attn_scores/bwd_dp", false, true, t, t, hd, 0.0f});
  s.push_back({p + "attn_scores/bwd_dq", false, false, t, hd, t, 0.0f});
  s.push_back({p + "attn_scores/bwd_dk", true, false, t, hd, t, 0.0f});
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
  const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
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
