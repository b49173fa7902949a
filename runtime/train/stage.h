// One pipeline stage: a contiguous range of a model's top-level layers, the parameters of those
// layers and, on the last stage, the model's loss. The one loop over a stage's layers that the
// sequential trainer and every pipeline executor run (forward, B, W, fused BW, recompute), with
// the memory category each pass is charged to (forward: kActivations; backward: kWorkspace).
#pragma once

#include <vector>

#include "runtime/layers/saved_context.h"
#include "runtime/models/model.h"
#include "runtime/tensor/tensor.h"

namespace pf {

class Stage {
 public:
  // Layers [begin, end) of `model` (which must outlive the stage); `index` of `num_stages`. The
  // last stage carries the loss. kInvalidArgument for a layer range outside the model.
  Stage(const Model& model, int index, int num_stages, int begin, int end);

  int index() const { return index_; }
  int begin() const { return begin_; }
  int end() const { return end_; }
  int num_layers() const { return end_ - begin_; }
  bool has_loss() const { return has_loss_; }
  // The parameters of this stage's layers, in model order. (The last stage also owns any model
  // parameter no layer reaches; the built-in models have none.)
  const std::vector<Parameter*>& parameters() const { return parameters_; }

  // Runs the layers on `x`; `contexts` is resized to num_layers() and filled. Sequence slices:
  // `previous` is the contexts of the slice before this one of the same micro-batch (null for the
  // first slice) and `position_offset` the position of the slice's first token (SavedContext::
  // set_slice); `previous` must stay alive until this slice's backward.
  Tensor forward(Tensor x, std::vector<SavedContext>& contexts, std::vector<SavedContext>* previous = nullptr,
                 int64_t position_offset = 0) const;
  // Last stage: the loss of `output` (scaled by `scale`) with its context, and the loss gradient.
  float loss_forward(const Tensor& output, const Tensor& targets, float scale, SavedContext& loss_context) const;
  Tensor loss_backward(SavedContext& loss_context) const;
  // Last stage, evaluation: the rows of `output` whose largest logit is their target.
  int64_t count_correct(const Tensor& output, const Tensor& targets) const;
  // The gradient of the stage input from the gradient of its output, through the layers in
  // reverse: fused (weight gradients accumulated too) or input-only (B; W follows).
  Tensor backward(std::vector<SavedContext>& contexts, Tensor grad_output) const;
  Tensor backward_input(std::vector<SavedContext>& contexts, Tensor grad_output) const;
  // W: accumulates the weight gradients from what B left in `contexts`.
  void backward_weight(std::vector<SavedContext>& contexts) const;

 private:
  void check_contexts(const std::vector<SavedContext>& contexts, const char* pass) const;

  const Model* model_;
  int index_, begin_, end_;
  bool has_loss_;
  std::vector<Parameter*> parameters_;
};

// The stages of `model` for a partition given as [begin, end) layer ranges (in stage order).
std::vector<Stage> make_stages(const Model& model, const std::vector<std::pair<int, int>>& ranges);

}  // namespace pf
