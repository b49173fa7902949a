// Softmax cross-entropy over the last dimension: loss = scale * mean over rows of
// -log softmax(logits)[target]. Stable (max-shifted), summed in double in row order.
// backward returns scale * (softmax - onehot(target)) / rows, shaped like the logits.
#pragma once

#include "runtime/layers/loss.h"

namespace pf {

class CrossEntropyLoss : public Loss {
 public:
  const char* type() const override { return "cross_entropy"; }
  float forward(const Tensor& logits, const Tensor& targets, float scale, SavedContext& ctx) override;
  Tensor backward(SavedContext& ctx) override;
  int64_t count_correct(const Tensor& logits, const Tensor& targets) const override;
};

}  // namespace pf
