// The matrix products of one GPT transformer block (runtime/layers/transformer_block.h) at
// `tokens` = rows x seq_len tokens, as pf::cpu::gemm calls: shared by gemm_bench (one benchmark per
// shape) and gpt_block_report (the sgemm rate the block is compared with).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::bench {

struct GemmShape {
  std::string name;
  bool trans_a, trans_b;
  int64_t m, n, k;
  float beta;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

// Linear: y[N,out] = x[N,in] W[out,in]^T; B: dx = dy W; W: dW += dy^T x.
inline void add_linear(std::vector<GemmShape>& out, const std::string& prefix, int64_t tokens, int64_t in,
                       int64_t outf) {
  out.push_back({prefix + "/fwd", false, true, tokens, outf, in, 0.0f});
  out.push_back({prefix + "/bwd_input", false, false, tokens, in, outf, 0.0f});
  out.push_back({prefix + "/bwd_weight", true, false, outf, in, tokens, 1.0f});
}

// The block's four Linears (attn.qkv, attn.proj, mlp.fc, mlp.proj; MLP hidden 4 d), F, B and W.
inline std::vector<GemmShape> block_linear_gemms(const std::string& prefix, int64_t d, int64_t tokens) {
  std::vector<GemmShape> s;
  add_linear(s, prefix + "qkv", tokens, d, 3 * d);
  add_linear(s, prefix + "attn_proj", tokens, d, d);
  add_linear(s, prefix + "fc", tokens, d, 4 * d);
  add_linear(s, prefix + "mlp_proj", tokens, 4 * d, d);
  return s;
}

// Per head and row of the batch, unfused and dense: scores = q k^T, out = p v, and their backward
// (cpu::attention_reference_*; the layer's fused kernel runs them in 32 x 128 blocks and skips
// the masked ones, bench/kernels:attention_bench).
inline std::vector<GemmShape> attention_head_gemms(const std::string& prefix, int64_t seq_len, int64_t head_dim) {
  const int64_t t = seq_len, hd = head_dim;
  return {{prefix + "attn_scores/fwd", false, true, t, t, hd, 0.0f},
          {prefix + "attn_values/fwd", false, false, t, hd, t, 0.0f},
          {prefix + "attn_values/bwd_dv", true, false, t, hd, t, 0.0f},
          {prefix + "attn_scores/bwd_dp", false, true, t, t, hd, 0.0f},
          {prefix + "attn_scores/bwd_dq", false, false, t, hd, t, 0.0f},
          {prefix + "attn_scores/bwd_dk", true, false, t, hd, t, 0.0f}};
}

}  // namespace pf::bench
