// A pre-LayerNorm GPT-2 block: h = x + attn(ln1(x)); y = h + mlp(ln2(h)), mlp = fc, GELU, proj.
// Built from Residual and Sequential; sub-layers are named <name>.ln1, <name>.attn, <name>.ln2,
// <name>.mlp.fc, <name>.mlp.act and <name>.mlp.proj, so parameters read e.g. "<name>.attn.qkv.weight".
//
// On CPU tensors the block runs the sub-layers itself, folding the element-wise passes between
// them into their neighbours: the attention residual into ln2's forward, the MLP residual into
// proj's GEMM (beta = 1 onto residual + bias), the fc bias gradient into the GELU backward, and
// both residual gradients into the LayerNorm backwards. The contexts are laid out as the
// Residual/Sequential composition lays them out, and W is the composition's W, so B and W stay
// separate. On CUDA tensors the composition runs as it is.
//
// `causal` false makes the attention bidirectional (AttentionOptions::causal: a Vision
// Transformer's encoder block; CPU or CUDA tensors, no sequence slices); config() writes "causal": false
// only then.
#pragma once

#include "runtime/layers/sequential.h"

namespace pf {

class CausalSelfAttention;
class GELU;
class LayerNorm;
class Linear;

class TransformerBlock : public Layer {
 public:
  TransformerBlock(std::string name, int64_t dim, int64_t heads, int64_t mlp_hidden, bool causal = true);
  const char* type() const override { return "transformer_block"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;
  // B then W; on the CPU each column split's all-reduce of its input gradient runs while the
  // block's weight gradients compute (Megatron's overlap), with the bits of B then W.
  Tensor backward(SavedContext& ctx, const Tensor& grad_output) override;

  // Tensor parallelism, always on for this block (Megatron's): the attention split by heads, the
  // MLP's fc column-parallel and proj row-parallel; the LayerNorms whole. Input and output whole:
  // two all-reduces forward (after attn.proj and mlp.proj), two backward (before attn.qkv and mlp.fc).
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  int64_t dim() const { return dim_; }
  int64_t heads() const { return heads_; }
  int64_t mlp_hidden() const { return mlp_hidden_; }
  bool causal() const { return causal_; }

 private:
  // The CPU backward_input, and with `weights` the fused backward (W interleaved, overlapped).
  Tensor backward_cpu(SavedContext& ctx, const Tensor& grad_output, bool weights);

  int64_t dim_, heads_, mlp_hidden_;
  bool causal_;
  // [Residual(ln1, attn), Residual(ln2, mlp)], sharing this layer's context.
  std::unique_ptr<Sequential> body_;
  // The sub-layers inside body_, for the fused CPU passes.
  LayerNorm* ln1_;
  CausalSelfAttention* attn_;
  LayerNorm* ln2_;
  Linear* fc_;
  GELU* act_;
  Linear* proj_;
};

}  // namespace pf
