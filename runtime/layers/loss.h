// A loss at the end of the last stage. forward returns scale * (mean loss over the rows) and keeps
// what backward needs; backward returns the gradient w.r.t. the logits (already scaled).
// The trainer passes scale = 1/m so that m micro-batch gradients sum to the batch-mean gradient.
#pragma once

#include <memory>

#include "runtime/layers/saved_context.h"
#include "runtime/tensor/tensor.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual const char* type() const = 0;
  // logits: f32 [..., C]; targets: i32 with numel = logits.numel() / C, values in [0, C).
  virtual float forward(const Tensor& logits, const Tensor& targets, float scale, SavedContext& ctx) = 0;
  virtual Tensor backward(SavedContext& ctx) = 0;
  // Evaluation: how many rows' largest logit (the first of equal ones) is their target.
  virtual int64_t count_correct(const Tensor& logits, const Tensor& targets) const = 0;
  // Takes its logits split by classes across `group` from now on (a vocabulary-parallel head,
  // TensorSplit::kVocab): member r gets classes [r C/T, (r+1) C/T) and the targets whole. False
  // when this loss cannot (nothing changes then). Once, before training.
  virtual bool split_classes(std::shared_ptr<TensorParallelGroup> group) {
    (void)group;
    return false;
  }
};

}  // namespace pf
