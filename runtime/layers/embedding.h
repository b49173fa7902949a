// Token plus learned position embedding: ids i32 [B, T] (T <= seq_len) -> f32 [B, T, dim],
// y[b, t] = token_weight[ids[b, t]] + position_weight[o + t], o = the context's position_offset
// (0 unless the ids are a sequence slice, SavedContext::set_slice). Without learned positions
// (`positions` false: Llama, whose attention rotates queries and keys instead) y[b, t] =
// token_weight[ids[b, t]], there is no position_weight, and seq_len only bounds T; that form runs
// on the CPU only. Ids have no gradient, so backward_input
// returns an undefined Tensor and only keeps the output gradient for backward_weight.
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Embedding : public Layer {
 public:
  Embedding(std::string name, int64_t vocab, int64_t seq_len, int64_t dim, float init_std = 0.02f,
            bool positions = true);
  const char* type() const override { return "embedding"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t vocab() const { return vocab_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t dim() const { return dim_; }
  bool positions() const { return positions_; }

 private:
  int64_t vocab_, seq_len_, dim_;
  float init_std_;
  bool positions_;
  Parameter token_weight_, position_weight_;
};

}  // namespace pf
