// y = x W^T + b over the last dimension; x is [..., in], W is [out, in], b is [out]. On the CPU the
// bias is broadcast into the output and the GEMM accumulates onto it (beta = 1).
//
// Under tensor parallelism (`split`, split_for_tensor_parallel; Megatron's column- and row-parallel
// linear) a member of a group of T holds:
// - kColumn: rows [r out/T, (r+1) out/T) of W and of b. It takes the whole input and returns its
//   slice of the output features; backward_input sums the members' input gradients over the group
//   (Megatron's f: identity forward, all-reduce backward).
// - kRow: columns [r in/T, (r+1) in/T) of W and the whole b. It takes its slice of the input
//   features (a column split's output); forward sums the members' partial products x_r W_r^T over
//   the group and then adds b (Megatron's g: all-reduce forward, identity backward).
// - kVocab: the head of a vocabulary-parallel loss, split as kColumn: its slice of the logits goes
//   to the loss as it is (CrossEntropyLoss::split_classes). A head tied to a vocabulary-parallel
//   embedding may split so (the same rows of the same matrix).
// Under sequence parallelism (TensorParallelGroup::sequence_parallel) the activations around the
// split are the members' sequence steps [B, S/T, ...]: a column (or vocabulary) split all-gathers
// its input over the steps before the GEMM and sums its input gradient into the members' steps
// (Megatron's f becomes all-gather / reduce-scatter); a row split sums its partial products into
// the members' steps before the bias and all-gathers its output gradient in backward_input (g
// becomes reduce-scatter / all-gather). The gathered input and output gradient are what W uses.
// in_features()/out_features() are the member's own; config() describes the whole layer.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Linear : public Layer {
 public:
  // `tied_to`: the weight is a tied copy of that parameter (Parameter::tied_to; e.g. a head tied
  // to the token embedding "embed.token_weight", [out, in] = [vocab, dim]); "" for its own.
  Linear(std::string name, int64_t in_features, int64_t out_features, bool bias = true,
         float init_stddev = 0.02f, const std::string& tied_to = "", TensorSplit split = TensorSplit::kNone);
  const char* type() const override { return "linear"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;
  // B then W, a column split's all-reduce (or reduce-scatter) of the input gradient running while W
  // computes (Megatron's overlap; the same bits as B then W).
  Tensor backward(SavedContext& ctx, const Tensor& grad_output) override;
  // backward_input; with `overlap` a column split's all-reduce of the input gradient (under
  // sequence parallelism its reduce-scatter) is only started (TensorParallelGroup::
  // start_all_reduce_sum, start_reduce_scatter_sequence): the caller may compute weight gradients
  // meanwhile and calls wait_input_gradient() before it reads the result.
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output, bool overlap);
  // Waits for the collective backward_input(..., true) started (none: returns at once).
  void wait_input_gradient() const;

  TensorSplit tensor_split() const override { return split_; }
  bool choose_tensor_split(TensorSplit split, int parts) override;
  bool splits_classes() const override { return split_ == TensorSplit::kVocab; }
  // A column split of an output made of blocks (attention's q | k | v, summing to out): each member
  // takes 1/T of every block (Megatron's qkv grouped by head) instead of 1/T of the whole. Before
  // split_for_tensor_parallel.
  void set_output_blocks(std::vector<int64_t> blocks);
  // kInvalidArgument naming the layer when T does not divide the split dimension, or for a tied weight.
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;

  // Epilogues folded into neighbours' passes (CPU tensors only; TransformerBlock uses them).
  // forward_residual: residual + forward(input), the residual and bias broadcast into the output
  // before the GEMM accumulates onto them (rounding: acc + (residual + b), not (acc + b) + residual;
  // under a row split ((sum of the partial products) + b) + residual).
  Tensor forward_residual(const Tensor& input, const Tensor& residual, SavedContext& ctx);
  // backward_input, taking the bias gradient (grad_output summed over rows, computed by the caller
  // in a pass it makes anyway: GELU::backward_input_column_sums); backward_weight adds it to the
  // bias gradient instead of summing grad_output again.
  // `overlap`: as backward_input's.
  Tensor backward_input_bias_grad(SavedContext& ctx, const Tensor& grad_output, const Tensor& bias_grad,
                                  bool overlap = false);

  // The output's shape for an input of `input_shape` on this member: [..., out], and under
  // sequence parallelism after a row split the member's steps of it ([B, S/T, out]).
  Shape output_shape(const Shape& input_shape) const;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  void check_input(const Tensor& input) const;
  // Split across a group of more than one member (after split_for_tensor_parallel).
  bool split_across_group() const { return group_ != nullptr; }
  bool sequence_parallel() const { return group_ != nullptr && group_->sequence_parallel(); }
  // "linear 'fc1' <what>", naming a collective in errors.
  std::string collective(const char* what) const;
  // output = (residual or 0) + bias + input W^T.
  Tensor forward_cpu(const Tensor& input, const Tensor* residual, SavedContext& ctx);
  // The same on a CUDA device (no residual): the GEMM there, the split's collectives staged through
  // the host (TensorParallelGroup); a row split's bias is added by member 0 before the sum.
  Tensor forward_cuda(const Tensor& input, SavedContext& ctx);
  // The input the GEMM takes: under sequence parallelism a column split gathers the members' steps.
  Tensor whole_input(const Tensor& given) const;

  int64_t in_, out_;  // this member's (the whole layer's unless split across a group)
  bool has_bias_;
  TensorSplit split_;
  std::vector<int64_t> output_blocks_;  // set_output_blocks; empty: one block
  std::shared_ptr<TensorParallelGroup> group_;  // set by split_for_tensor_parallel when T > 1
  float init_stddev_;
  Parameter weight_, bias_;
};

// Megatron's pair inside a block: `column` column-parallel (1/T of each of `column_blocks`, or of
// its whole output), `row` row-parallel over the same features; both split across `group`.
void split_column_row_pair(Linear& column, Linear& row, const std::shared_ptr<TensorParallelGroup>& group,
                           std::vector<int64_t> column_blocks = {});

}  // namespace pf
