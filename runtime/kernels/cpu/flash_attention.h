// The causal attention core of one (batch, head) on the CPU, fused and blocked (flash attention):
// out = softmax(q k^T / sqrt(hd) + causal mask) v, for `queries` rows of q at positions
// offset + t, which attend to keys and values 0 .. offset + t (keys >= offset + queries; with
// sequence slices the earlier slices' keys come first). With AttentionDims::causal false
// (bidirectional, a Vision Transformer's encoder) there is no mask: every query attends to all
// `keys` keys, and the blocks below simply run to the last key.
//
// Forward: per block of queries, the key blocks up to the diagonal; for each, the scores, a running
// row maximum and row sum (online softmax) and the output accumulated in place of the probabilities.
// It keeps one number per query row, the log-sum-exp lse = max + log(sum), not the
// queries x keys probabilities: a backward recomputes them blockwise as exp(s - lse).
// Backward (the standard flash-attention backward): D_i = rowsum(dO o O); per key block and query
// block P = exp(s - lse), dV += P^T dO, dP = dO V^T, dS = P o (dP - D), dQ += dS K / sqrt(hd),
// dK += dS^T Q / sqrt(hd); dK and dV cover the whole key range, dQ the queries.
//
// The block products go through OpenBLAS (cpu::gemm on strided sub-matrices, so q, k and v are
// read in place; k and v are transposed once per call so the score products run untransposed);
// hand-written AVX2 register tiles (the build targets x86-64-v3) measured up to 1.9x slower than
// OpenBLAS, which picks AVX-512 kernels at run time where the CPU has them. The row reductions run in 8 lanes (vector extensions); exp is cpu::fast_exp.
// Deterministic: every sum has a fixed order, so results are bitwise the same for a build and BLAS
// thread count. OpenBLAS splits products over output blocks, never over the summed dimension, and
// the kernel's own row arithmetic does not depend on the other rows of its block (key blocks start
// at key 0), so where the BLAS computes an element alike whatever the product's shape (OpenBLAS's
// AVX-512 kernels) results do not depend on the BLAS thread count either, and a sequence slice's
// output equals the whole sequence's rows bitwise. OpenBLAS's Haswell / Zen AVX2 kernels compute a
// product's edge tiles differently: there both agree to about 1e-7 (tests/util/blas_shapes.h;
// tests/kernels:flash_attention_test checks the slices).
//
// The reference functions below are the unfused math (two BLAS products and a separate causal
// softmax over the full queries x keys probabilities), kept for tests and bench/kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pf::cpu {

// Queries q[t] (t < queries) sit at position offset + t and attend to keys 0 .. offset + t; or,
// with causal false, to all keys 0 .. keys - 1.
// Requires queries >= 0, offset >= 0, keys >= offset + queries, head_dim >= 1, and offset 0 when
// causal is false (a query's position then means nothing).
struct AttentionDims {
  int64_t queries = 0, keys = 0, head_dim = 0, offset = 0;
  bool causal = true;
};

// A row-major matrix of head_dim-wide rows: row r starts at data + r * stride (e.g. a head's
// columns inside a [T, 3 dim] qkv block: stride 3 dim). Borrowed.
struct ConstRows {
  const float* data;
  int64_t stride;
};
struct Rows {
  float* data;
  int64_t stride;
};

// Floats of workspace flash_attention_forward and _backward need for `dims` (caller-owned, any
// alignment, contents on entry do not matter).
size_t flash_attention_workspace_floats(const AttentionDims& dims);

// out [queries, hd] and lse [queries] (contiguous) from q [queries, hd], k, v [keys, hd].
void flash_attention_forward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, Rows out,
                             float* lse, float* workspace);

// dq [queries, hd], dk and dv [keys, hd] (written, not accumulated; keys no query attends to get 0)
// from the forward's inputs, its out and lse, and dout [queries, hd].
void flash_attention_backward(const AttentionDims& dims, ConstRows q, ConstRows k, ConstRows v, ConstRows out,
                              const float* lse, ConstRows dout, Rows dq, Rows dk, Rows dv, float* workspace);

// The unfused reference on contiguous matrices (q, out, dout, dq [queries, hd]; k, v, dk, dv
// [keys, hd]): probs [queries, keys] (0 above the causal diagonal when causal) and out; its backward from
// probs, with dp a [queries, keys] workspace.
void attention_reference_forward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                                 float* probs, float* out);
void attention_reference_backward(const AttentionDims& dims, const float* q, const float* k, const float* v,
                                  const float* probs, const float* dout, float* dp, float* dq, float* dk,
                                  float* dv);

}  // namespace pf::cpu
