// Multi-head self-attention on the GPU (runtime/layers/attention.cc), composed from cuBLAS
// (strided-batched over heads) and the softmax kernel; causal unless AttentionShape::causal is false,
// grouped-query when kv_heads < heads (the key/value gradients of a shared head are summed over its
// query heads in head order, grouped_query.h). In the plain (GPT-2) form:
//   qkv = x W_qkv^T + b_qkv  [rows, 3 dim], head h uses columns h*hd.. of each of q | k | v;
//   S_h = (1/sqrt(hd)) q_h k_h^T; P_h = causal_softmax(S_h); o_h = P_h v_h (heads concatenated
//   into `attended` [rows, dim]); y = attended W_proj^T + b_proj.
// rows = batch * steps; x, y [rows, dim]. The score matrices are full [steps, steps] products
// (the masked half is computed and then zeroed), like the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/linear.h"
#include "runtime/kernels/cuda/types.h"

namespace pf::cuda {

// dim: the query width (heads * head_dim). kv_heads (0: heads) and causal make it the grouped-query,
// bidirectional forms (runtime/layers/attention.h): qkv rows are q [dim] | k [kv_dim] | v [kv_dim],
// query head h reads key/value head h / (heads / kv_heads). Those forms are for the attention core
// (attention_core_forward / backward); the composed attention_forward / backward take both too.
struct AttentionShape {
  int64_t batch = 0, steps = 0, dim = 0, heads = 0;
  int64_t kv_heads = 0;  // 0: heads
  bool causal = true;    // false: every query attends to every key of its sequence
  int64_t rows() const { return batch * steps; }
  int64_t head_dim() const { return dim / heads; }
  int64_t key_heads() const { return kv_heads == 0 ? heads : kv_heads; }
  int64_t kv_dim() const { return key_heads() * head_dim(); }
  int64_t qkv_width() const { return dim + 2 * kv_dim(); }
};

template <typename T>
struct AttentionWeights {
  const T* qkv_weight = nullptr;   // [qkv_width, dim] (3 dim without grouped-query heads)
  const T* qkv_bias = nullptr;     // [qkv_width]
  const T* proj_weight = nullptr;  // [dim, dim]
  const T* proj_bias = nullptr;    // [dim]
};

struct AttentionGrads {  // fp32, accumulated
  float* qkv_weight = nullptr;
  float* qkv_bias = nullptr;
  float* proj_weight = nullptr;
  float* proj_bias = nullptr;
};

// What F saves for B and W, and what B saves for W (caller-owned device buffers).
template <typename T>
struct AttentionActivations {
  T* qkv = nullptr;       // [rows, qkv_width]        F writes, B reads
  T* probs = nullptr;     // [batch, heads, steps, steps]  F writes, B reads
  T* attended = nullptr;  // [rows, dim]              F writes, W reads (input of proj)
  T* d_qkv = nullptr;     // [rows, qkv_width]        B writes, W reads
};

// Scratch for attention_forward / attention_backward_input (not kept between calls).
template <typename T>
size_t attention_workspace_bytes(const AttentionShape& shape);

// The attention core alone (qkv -> attended), for tests and other compositions. `workspace` as
// attention_workspace_bytes.
template <typename T>
void attention_core_forward(cudaStream_t stream, const AttentionShape& shape, const T* qkv, T* probs,
                            T* attended, void* workspace, const GemmOptions& options = {});
template <typename T>
void attention_core_backward(cudaStream_t stream, const AttentionShape& shape, const T* qkv,
                             const T* probs, const T* d_attended, T* d_qkv, void* workspace,
                             const GemmOptions& options = {});

template <typename T>
void attention_forward(cudaStream_t stream, const AttentionShape& shape, const AttentionWeights<T>& w,
                       const T* x, const AttentionActivations<T>& acts, T* y, void* workspace,
                       const LinearOptions& options = {});
// dx written; acts.d_qkv written for W.
template <typename T>
void attention_backward_input(cudaStream_t stream, const AttentionShape& shape,
                              const AttentionWeights<T>& w, const AttentionActivations<T>& acts,
                              const T* dy, T* dx, void* workspace, const LinearOptions& options = {});
// Accumulates the four gradients (proj first, then qkv, like the CPU). x is the forward input.
template <typename T>
void attention_backward_weight(cudaStream_t stream, const AttentionShape& shape, const T* x,
                               const AttentionActivations<T>& acts, const T* dy, const AttentionGrads& g,
                               const LinearOptions& options = {});

}  // namespace pf::cuda
