// One TransformerBlock (runtime/layers/transformer_block.h) through forward, backward_input (B) and
// backward_weight (W), at B x T = 8 x 64 tokens, d_model 128 and 256 (4 heads, MLP 4 x d_model),
// BLAS on one thread. Counters: tokens/s and the achieved GFLOP/s of the block's matrix products
// (forward 24 d^2 + 4 T d per token for the Linears and the dense attention products; backward
// twice that), so the figure compares directly with gemm_bench.
//
// llama_block/forward_backward runs a LlamaBlock (RMSNorm, grouped-query attention with 2 key/value
// heads and rotary positions, SwiGLU of llama_default_mlp_hidden(d), no biases) the same way: its
// tokens/s against the GPT block's at the same width.
//
// The parts/ benchmarks profile the block's F+B+W: the attention layer alone and the MLP's six
// GEMMs alone (fc and proj: forward, input and weight gradients). The block's time minus those
// two is what the LayerNorms, GELU, biases and residual adds cost (per pass:
// bench/kernels:epilogue_bench).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/cpu/blas.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/models/init.h"
#include "runtime/tensor/tensor.h"

namespace {

constexpr int64_t kBatch = 8;
constexpr int64_t kSeqLen = 64;
constexpr int64_t kHeads = 4;

enum class Phase { kForward, kForwardBackward };

pf::Tensor random_tensor(const pf::Shape& shape, uint32_t seed) {
  pf::Tensor t = pf::Tensor::empty(shape);
  uint32_t x = seed * 2654435761u + 1;
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<float>((x >> 8) & 0xFFFF) / 65536.0f - 0.5f;
  }
  return t;
}

double block_flops_per_token_forward(int64_t d) {
  return 24.0 * static_cast<double>(d) * static_cast<double>(d) + 4.0 * kSeqLen * static_cast<double>(d);
}

// The benchmark loop: forward of `layer` on [kBatch, kSeqLen, d], then (kForwardBackward) B and W.
void run_layer(benchmark::State& state, pf::Layer& layer, int64_t d, Phase phase) {
  pf::initialize_parameters(layer.parameters(), 1234);
  const pf::Tensor x = random_tensor({kBatch, kSeqLen, d}, 1);
  const pf::Tensor dy = random_tensor({kBatch, kSeqLen, d}, 2);
  for (auto _ : state) {
    pf::SavedContext ctx;
    pf::Tensor y = layer.forward(x, ctx);
    benchmark::DoNotOptimize(y.f32());
    if (phase == Phase::kForwardBackward) {
      pf::Tensor dx = layer.backward_input(ctx, dy);
      layer.backward_weight(ctx);
      benchmark::DoNotOptimize(dx.f32());
    }
    benchmark::ClobberMemory();
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(kBatch * kSeqLen), benchmark::Counter::kIsIterationInvariantRate);
}

void run_block(benchmark::State& state, int64_t d, Phase phase) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  pf::TransformerBlock block("blocks.0", d, kHeads, 4 * d);
  run_layer(state, block, d, phase);
  const double tokens = static_cast<double>(kBatch * kSeqLen);
  const double passes = phase == Phase::kForward ? 1.0 : 3.0;  // backward = B + W = 2 x forward
  state.counters["GFLOP/s"] = benchmark::Counter(passes * tokens * block_flops_per_token_forward(d) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("B*T=" + std::to_string(kBatch) + "*" + std::to_string(kSeqLen) +
                 " d_model=" + std::to_string(d) + " heads=" + std::to_string(kHeads) + " blas_threads=1");
}

void run_llama_block(benchmark::State& state, int64_t d) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  pf::LlamaBlockConfig c;
  c.dim = d;
  c.heads = kHeads;
  c.kv_heads = kHeads / 2;
  c.mlp_hidden = pf::llama_default_mlp_hidden(d);
  pf::LlamaBlock block("blocks.0", c);
  run_layer(state, block, d, Phase::kForwardBackward);
  state.SetLabel("B*T=" + std::to_string(kBatch) + "*" + std::to_string(kSeqLen) + " d_model=" + std::to_string(d) +
                 " heads=" + std::to_string(kHeads) + " kv_heads=" + std::to_string(c.kv_heads) +
                 " mlp=" + std::to_string(c.mlp_hidden) + " blas_threads=1");
}

void run_attention(benchmark::State& state, int64_t d) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  pf::CausalSelfAttention attn("blocks.0.attn", d, kHeads);
  run_layer(state, attn, d, Phase::kForwardBackward);
}

void run_mlp_gemms(benchmark::State& state, int64_t d) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  const int64_t rows = kBatch * kSeqLen, h = 4 * d;
  const pf::Tensor x = random_tensor({rows, d}, 1), w_fc = random_tensor({h, d}, 2), w_proj = random_tensor({d, h}, 3);
  const pf::Tensor post = random_tensor({rows, h}, 4), dy = random_tensor({rows, d}, 5);
  pf::Tensor pre = pf::Tensor::empty({rows, h}), y = pf::Tensor::empty({rows, d}), d_post = pf::Tensor::empty({rows, h});
  pf::Tensor dx = pf::Tensor::empty({rows, d}), dw_fc = pf::Tensor::zeros({h, d}), dw_proj = pf::Tensor::zeros({d, h});
  for (auto _ : state) {
    pf::cpu::gemm(false, true, rows, h, d, 1.0f, x.f32(), w_fc.f32(), 1.0f, pre.f32());
    pf::cpu::gemm(false, true, rows, d, h, 1.0f, post.f32(), w_proj.f32(), 1.0f, y.f32());
    pf::cpu::gemm(false, false, rows, h, d, 1.0f, dy.f32(), w_proj.f32(), 0.0f, d_post.f32());
    pf::cpu::gemm(false, false, rows, d, h, 1.0f, post.f32(), w_fc.f32(), 0.0f, dx.f32());
    pf::cpu::gemm(true, false, d, h, rows, 1.0f, dy.f32(), post.f32(), 1.0f, dw_proj.f32());
    pf::cpu::gemm(true, false, h, d, rows, 1.0f, post.f32(), x.f32(), 1.0f, dw_fc.f32());
    benchmark::ClobberMemory();
  }
}

const bool registered = [] {
  for (int64_t d : {128, 256}) {
    const std::string suffix = "/d" + std::to_string(d);
    benchmark::RegisterBenchmark(("transformer_block/forward" + suffix).c_str(), [d](benchmark::State& s) {
      run_block(s, d, Phase::kForward);
    })->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("transformer_block/forward_backward" + suffix).c_str(),
                                 [d](benchmark::State& s) { run_block(s, d, Phase::kForwardBackward); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("llama_block/forward_backward" + suffix).c_str(),
                                 [d](benchmark::State& s) { run_llama_block(s, d); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("parts/attention_fbw" + suffix).c_str(), [d](benchmark::State& s) {
      run_attention(s, d);
    })->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("parts/mlp_gemms_fbw" + suffix).c_str(), [d](benchmark::State& s) {
      run_mlp_gemms(s, d);
    })->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
