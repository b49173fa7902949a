// Softmax cross-entropy over the last dimension: loss = scale * mean over rows of
// -log softmax(logits)[target]. Stable (max-shifted), summed in double in row order.
// backward returns scale * (softmax - onehot(target)) / rows, shaped like the logits.
//
// Vocabulary-parallel (split_classes; Megatron's vocab-parallel cross-entropy): each member of the
// group holds its slice of the classes. Forward reduces three numbers per row over the group: the
// row maximum (every member's, the largest taken), and, summed in rank order in double, the sum of
// exp(x - max) over each member's classes and the target's logit (from the member that holds it).
// The full logits are never gathered; backward uses the saved maximum and sum and needs no
// communication. The loss is the unsplit one up to the double-precision order of the sum of
// exponentials. CPU only.
#pragma once

#include "runtime/layers/loss.h"

namespace pf {

class CrossEntropyLoss : public Loss {
 public:
  const char* type() const override { return "cross_entropy"; }
  float forward(const Tensor& logits, const Tensor& targets, float scale, SavedContext& ctx) override;
  Tensor backward(SavedContext& ctx) override;
  int64_t count_correct(const Tensor& logits, const Tensor& targets) const override;
  bool split_classes(std::shared_ptr<TensorParallelGroup> group) override;

 private:
  float forward_split(const Tensor& logits, const Tensor& targets, float scale, SavedContext& ctx);
  Tensor backward_split(SavedContext& ctx);
  int64_t count_correct_split(const Tensor& logits, const Tensor& targets) const;

  std::shared_ptr<TensorParallelGroup> group_;  // set by split_classes (T > 1)
};

}  // namespace pf
