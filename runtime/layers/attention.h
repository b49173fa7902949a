// Causal multi-head self-attention (GPT-2): x [B, T, dim] -> qkv = Linear(dim, 3 dim) split into
// q | k | v (head h uses columns [h*hd, (h+1)*hd) of each), per head softmax(q k^T / sqrt(hd)) with
// position t attending to positions <= t, times v, heads concatenated, then Linear(dim, dim).
//
// AttentionOptions make it Llama's: grouped-query attention (kv_heads dividing heads: qkv is
// Linear(dim, (heads + 2 kv_heads) hd) split into q [heads hd] | k [kv_heads hd] | v [kv_heads hd],
// query head h reads key/value head h / (heads / kv_heads); the gradients of a shared key/value
// head are summed over its query heads in head order), no biases, and rotary positions (RoPE,
// Hugging Face's rotate_half form): after the qkv Linear, the pair (x_i, x_{i + hd/2}) of every
// query and key head at position p is rotated by p * theta^(-2i / hd), i < hd / 2, computed in f32
// as Hugging Face does; the backward rotates the query and key gradients back. Both run on CUDA
// tensors too (the attention core with grouped heads; the rotation by runtime/kernels/cuda/rotary.h).
// AttentionOptions::causal false makes it bidirectional (a Vision Transformer's encoder): every
// query attends to all T keys of its sequence, forward and backward (the CPU kernel runs without
// the mask; on CUDA tensors the unmasked softmax). That form does not run on sequence slices (a slice's queries would
// need the later slices' keys): a sliced context (a position offset or an earlier slice) is
// refused naming the layer. The class keeps its name; type() is "attention" either way, and the
// JSON field "causal" (default true) is written by config() only when false.
//
// Child contexts: 0 = the qkv Linear, 1 = the attention core, 2 = the output projection. The core
// keeps what backward_input needs (and drops it there): on the CPU the qkv activations, the
// output (the projection's input: no extra bytes) and one log-sum-exp per (row, head, query) —
// the fused kernel (runtime/kernels/cpu/flash_attention.h) recomputes the probabilities blockwise;
// on the GPU qkv and the [B, heads, T, T] probabilities.
//
// Sequence slices (SavedContext::set_slice; CPU only): the forward of a slice attends to the keys
// and values of the earlier slices of its micro-batch, read from their attention-core contexts
// (the key/value cache is those contexts' qkv), with its queries at positions offset + t. Its
// backward adds the gradient of those keys and values to each earlier core's "kv_grad", and adds
// its own "kv_grad" (from the later slices) to its key/value gradient. So slice backwards must run
// last slice first, and a slice's context lives until its own backward.

#pragma once

#include "runtime/layers/layer.h"
#include "runtime/layers/linear.h"

namespace pf {

struct AttentionOptions {
  int64_t kv_heads = 0;     // key/value heads; 0: as many as query heads
  bool bias = true;         // biases on the qkv and output projections
  float rope_theta = 0.0f;  // rotary position base (Llama: 10000 or 500000); 0: no rotation
  bool causal = true;       // false: bidirectional, every query attends to every key
};

class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(std::string name, int64_t dim, int64_t heads, float init_std = 0.02f,
                      const AttentionOptions& options = {});
  const char* type() const override { return "attention"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;
  // backward_input; with `overlap` the qkv's all-reduce of the input gradient is only started
  // (Linear::backward_input's): the caller calls wait_input_gradient() before reading the result.
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output, bool overlap);
  void wait_input_gradient() const { qkv_->wait_input_gradient(); }
  // B then W, the qkv's all-reduce of the input gradient running while W computes.
  Tensor backward(SavedContext& ctx, const Tensor& grad_output) override;

  // Tensor parallelism: this member keeps heads / T query heads and kv_heads / T key/value heads
  // (qkv column-parallel over whole heads, the output projection row-parallel; Megatron's split).
  // kInvalidArgument naming both numbers when T does not divide heads or kv_heads.
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  int64_t dim() const { return dim_; }
  // This member's heads (all of them unless split).
  int64_t heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }
  const AttentionOptions& options() const { return options_; }

 private:
  // Rotates this slice's query and key heads in qkv [B, T, width] in place by the angles of
  // positions offset .. offset + T - 1 (inverse: by minus those angles, for their gradients).
  void rotate(Tensor& qkv, int64_t offset, bool inverse) const;

  int64_t dim_, heads_, head_dim_, kv_heads_;
  int64_t q_dim_;  // this member's query width, heads_ x head_dim_ (dim_ unless split)
  int parts_ = 1;  // the tensor-parallel size it is split over
  float init_std_;
  AttentionOptions options_;
  std::unique_ptr<Linear> qkv_, proj_;
};

}  // namespace pf
