// Token plus learned position embedding: ids i32 [B, T] (T <= seq_len) -> f32 [B, T, dim],
// y[b, t] = token_weight[ids[b, t]] + position_weight[o + t], o = the context's position_offset
// (0 unless the ids are a sequence slice, SavedContext::set_slice). Without learned positions
// (`positions` false: Llama, whose attention rotates queries and keys instead) y[b, t] =
// token_weight[ids[b, t]], there is no position_weight, and seq_len only bounds T. Ids have no
// gradient, so backward_input
// returns an undefined Tensor and only keeps the output gradient for backward_weight.
//
// Vocabulary-parallel ("parallel": "vocab", TensorSplit::kVocab; Megatron's VocabParallelEmbedding):
// member r of a group of T holds token rows [r vocab/T, (r+1) vocab/T), looks up the ids in its
// range (zeros for the others), and the members' outputs are summed over the group before the
// positions (whole on every member) are added. Exactly one member contributes each row, so the sum
// is exact: the output is bitwise the unsplit one in either reduction. Backward needs no
// communication. CPU only.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Embedding : public Layer {
 public:
  Embedding(std::string name, int64_t vocab, int64_t seq_len, int64_t dim, float init_std = 0.02f,
            bool positions = true, TensorSplit split = TensorSplit::kNone);
  const char* type() const override { return "embedding"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  TensorSplit tensor_split() const override { return split_; }
  bool choose_tensor_split(TensorSplit split, int parts) override;
  // kInvalidArgument naming the layer when T does not divide the vocabulary.
  void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) override;
  TensorParallelFloats tensor_parallel_floats() override;

  int64_t vocab() const { return vocab_; }  // the whole vocabulary
  int64_t seq_len() const { return seq_len_; }
  int64_t dim() const { return dim_; }
  bool positions() const { return positions_; }

 private:
  int64_t vocab_, seq_len_, dim_;
  float init_std_;
  bool positions_;
  TensorSplit split_ = TensorSplit::kNone;
  std::shared_ptr<TensorParallelGroup> group_;  // set by split_for_tensor_parallel when T > 1
  int64_t first_token_ = 0, tokens_held_;       // the token rows this member holds
  // Sequence parallelism: the output is this member's steps [B, S/T, dim] (the sum reduce-scattered,
  // the positions of those steps added), and backward all-gathers the output gradient.
  bool sequence_parallel() const { return group_ != nullptr && group_->sequence_parallel(); }
  // forward on a CUDA device; `ids` is the host copy of `input`, already checked.
  Tensor forward_cuda(const Tensor& input, const int32_t* ids, SavedContext& ctx);
  Parameter token_weight_, position_weight_;
};

}  // namespace pf
