// A pre-LayerNorm GPT-2 block on the GPU (runtime/layers/transformer_block.cc):
//   h = x + attn(ln1(x));  y = h + proj(GELU(fc(ln2(h))))
// split into F, B (input gradient) and W (weight gradients) over structs of device pointers, for
// the GPU benchmark and, later, the layers. x, h, y [rows, dim], rows = batch * steps; the MLP
// hidden width is `hidden`. Parameter values are T; gradients fp32, accumulated by W.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/cuda/linear.h"
#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

struct GptBlockShape {
  int64_t batch = 0, steps = 0, dim = 0, heads = 0, hidden = 0;
  float eps = 1e-5f;  // LayerNorm
  int64_t rows() const { return batch * steps; }
  AttentionShape attention() const { return {batch, steps, dim, heads}; }
};

template <typename T>
struct GptBlockWeights {
  const T* ln1_weight = nullptr;  // [dim]
  const T* ln1_bias = nullptr;
  AttentionWeights<T> attn;
  const T* ln2_weight = nullptr;
  const T* ln2_bias = nullptr;
  const T* fc_weight = nullptr;    // [hidden, dim]
  const T* fc_bias = nullptr;      // [hidden]
  const T* proj_weight = nullptr;  // [dim, hidden]
  const T* proj_bias = nullptr;    // [dim]
};

struct GptBlockGrads {
  float* ln1_weight = nullptr;
  float* ln1_bias = nullptr;
  AttentionGrads attn;
  float* ln2_weight = nullptr;
  float* ln2_bias = nullptr;
  float* fc_weight = nullptr;
  float* fc_bias = nullptr;
  float* proj_weight = nullptr;
  float* proj_bias = nullptr;
};

// The 12 parameter (or gradient) pointers in the block's parameter order: ln1 weight, ln1 bias,
// attention qkv weight, qkv bias, out weight, out bias, ln2 weight, ln2 bias, fc weight, fc bias,
// proj weight, proj bias (the order of TransformerBlock::parameters()).
constexpr int kGptBlockParameters = 12;
template <typename P, typename Out>
Out gpt_block_pointers(P* const (&p)[kGptBlockParameters]) {
  Out o;
  o.ln1_weight = p[0];
  o.ln1_bias = p[1];
  o.attn = {p[2], p[3], p[4], p[5]};
  o.ln2_weight = p[6];
  o.ln2_bias = p[7];
  o.fc_weight = p[8];
  o.fc_bias = p[9];
  o.proj_weight = p[10];
  o.proj_bias = p[11];
  return o;
}
template <typename T>
GptBlockWeights<T> gpt_block_weights(const T* const (&p)[kGptBlockParameters]) {
  return gpt_block_pointers<const T, GptBlockWeights<T>>(p);
}
inline GptBlockGrads gpt_block_grads(float* const (&p)[kGptBlockParameters]) {
  return gpt_block_pointers<float, GptBlockGrads>(p);
}

// Saved state: F writes the first group, B the second; W reads both (and x, dy).
template <typename T>
struct GptBlockActivations {
  float* ln1_mean = nullptr;  // [rows]
  float* ln1_rstd = nullptr;  // [rows]
  T* ln1_out = nullptr;       // [rows, dim]
  AttentionActivations<T> attn;
  T* h = nullptr;             // [rows, dim]
  float* ln2_mean = nullptr;
  float* ln2_rstd = nullptr;
  T* ln2_out = nullptr;       // [rows, dim]
  T* fc_pre = nullptr;        // [rows, hidden] (pre-GELU)
  T* fc_act = nullptr;        // [rows, hidden]
  // written by B
  T* d_ln1_out = nullptr;     // [rows, dim]
  T* d_h = nullptr;           // [rows, dim]
  T* d_ln2_out = nullptr;     // [rows, dim]
  T* d_fc_pre = nullptr;      // [rows, hidden]
};

// One buffer for all activations: its size, and the pointers carved out of it (256-byte aligned).
template <typename T>
size_t gpt_block_activation_bytes(const GptBlockShape& shape);
template <typename T>
GptBlockActivations<T> gpt_block_carve_activations(const GptBlockShape& shape, void* base);
// Scratch for F and B (not kept between calls).
template <typename T>
size_t gpt_block_workspace_bytes(const GptBlockShape& shape);

template <typename T>
void gpt_block_forward(cudaStream_t stream, const GptBlockShape& shape, const GptBlockWeights<T>& w,
                       const T* x, const GptBlockActivations<T>& acts, T* y, void* workspace,
                       const LinearOptions& options = {});
// dx written (may not alias dy).
template <typename T>
void gpt_block_backward_input(cudaStream_t stream, const GptBlockShape& shape, const GptBlockWeights<T>& w,
                              const T* x, const GptBlockActivations<T>& acts, const T* dy, T* dx,
                              void* workspace, const LinearOptions& options = {});
template <typename T>
void gpt_block_backward_weight(cudaStream_t stream, const GptBlockShape& shape, const T* x,
                               const GptBlockActivations<T>& acts, const T* dy, const GptBlockGrads& g,
                               const LinearOptions& options = {});

}  // namespace pf::cuda
