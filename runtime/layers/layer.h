// The unit a model is built from and split at. The backward pass is two calls:
//   backward_input (B): gradient w.r.t. the input, on the critical path between stages;
//   backward_weight (W): gradients w.r.t. the parameters, accumulated (+=) into Parameter::grad.
// backward() is the fused form and must equal B then W bitwise.
//
// All per-micro-batch state lives in the SavedContext the caller passes in, never in the layer,
// so several micro-batches (and, later, several weight versions) can be in flight at once.
// backward_input drops from the context everything backward_weight does not need and leaves what
// it does need (e.g. the layer input and the output gradient); backward_weight releases the rest.
// So activation memory falls at B for parameter-free layers, and at W for the others.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/layers/parameter.h"
#include "runtime/layers/saved_context.h"
#include "runtime/tensor/tensor.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual const char* type() const = 0;
  // The layer's description (type and options) in the model JSON format.
  virtual nlohmann::json config() const = 0;

  // Parameters in a fixed order (the order of gradient accumulation and checkpoints).
  virtual std::vector<Parameter*> parameters() { return {}; }

  virtual Tensor forward(const Tensor& input, SavedContext& ctx) = 0;
  // Returns an undefined Tensor when the input has no gradient (token ids).
  virtual Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) = 0;
  virtual void backward_weight(SavedContext& ctx) { ctx.clear(); }
  virtual Tensor backward(SavedContext& ctx, const Tensor& grad_output) {
    Tensor grad_input = backward_input(ctx, grad_output);
    backward_weight(ctx);
    return grad_input;
  }

  // Tensor parallelism (runtime/tensor_parallel/group.h). How the layer splits across a group
  // (kNone: it stays whole on every member), and taking this member's slice of it: once, before
  // the parameters are initialised (split_model_for_tensor_parallel calls it).
  virtual TensorSplit tensor_split() const { return TensorSplit::kNone; }
  // Gives a layer that can be split (a linear; an embedding by kVocab) the split `split` before
  // split_for_tensor_parallel (the default splits of a model without "parallel" annotations); false
  // for any other layer, and for kVocab when `parts` does not divide the vocabulary (the model then
  // keeps its vocabulary whole).
  virtual bool choose_tensor_split(TensorSplit split, int parts) {
    (void)split;
    (void)parts;
    return false;
  }
  virtual void split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) { (void)group; }
  // Floats per input row (token) this member all-reduces over its group, in forward and in
  // backward_input, once split (the planner's cost of the split). This default reads the split
  // matrices: one split by rows (a column-parallel [out, in] weight) all-reduces its input gradient,
  // `in` floats, in backward; one split by columns (row-parallel) its partial outputs, `out`
  // floats, in forward. Layers that reduce otherwise (the vocabulary-parallel embedding) say so.
  struct TensorParallelFloats {
    int64_t forward = 0, backward = 0;
  };
  virtual TensorParallelFloats tensor_parallel_floats() {
    TensorParallelFloats floats;
    for (const Parameter* p : parameters()) {
      if (!p->shard.split() || p->shard.full.size() != 2) continue;  // a bias: no all-reduce of its own
      if (p->shard.dim == 0) floats.backward += p->shard.full[1];
      else floats.forward += p->shard.full[0];
    }
    return floats;
  }
  // True for a layer whose output is split across the group by classes (a vocabulary-parallel
  // head, kVocab): the loss takes that output as it is (Loss::split_classes).
  virtual bool splits_classes() const { return false; }
  // True for element-wise layers (relu, gelu): a column-split activation passes through them.
  virtual bool elementwise() const { return false; }

 private:
  std::string name_;
};

// Joins a parameter-name prefix and a suffix with '.', skipping an empty prefix.
std::string join_name(const std::string& prefix, const std::string& suffix);

}  // namespace pf
