#include "runtime/train/stage.h"

#include <unordered_set>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf {

Stage::Stage(const Model& model, int index, int num_stages, int begin, int end)
    : model_(&model), index_(index), begin_(begin), end_(end), has_loss_(index == num_stages - 1) {
  const int L = static_cast<int>(model.layers().size());
  PF_CHECK_ARG(index >= 0 && index < num_stages, "stage ", index, ": not in [0, ", num_stages, ")");
  PF_CHECK_ARG(begin >= 0 && begin <= end && end <= L, "stage ", index, ": layers [", begin, ", ", end,
               ") are not a range of the model's ", L, " layers");
  std::unordered_set<const Parameter*> seen;
  for (int i = begin; i < end; ++i)
    for (Parameter* p : model.layers()[static_cast<size_t>(i)]->parameters())
      if (seen.insert(p).second) parameters_.push_back(p);
  if (has_loss_) {
    // Whatever no layer reaches goes with the loss.
    std::unordered_set<const Parameter*> reached;
    for (const auto& layer : model.layers())
      for (Parameter* p : layer->parameters()) reached.insert(p);
    for (Parameter* p : model.parameters())
      if (!reached.count(p) && seen.insert(p).second) parameters_.push_back(p);
  }
}

void Stage::check_contexts(const std::vector<SavedContext>& contexts, const char* pass) const {
  PF_INTERNAL_CHECK(contexts.size() == static_cast<size_t>(num_layers()), "stage ", index_, ": ", pass,
                    " runs before its forward (", contexts.size(), " contexts for ", num_layers(), " layers)");
}

Tensor Stage::forward(Tensor x, std::vector<SavedContext>& contexts, std::vector<SavedContext>* previous,
                      int64_t position_offset) const {
  const auto& layers = model_->layers();
  contexts.clear();
  contexts.resize(static_cast<size_t>(num_layers()));
  if (previous) check_contexts(*previous, "the next sequence slice's F");
  if (previous || position_offset != 0)
    for (size_t i = 0; i < contexts.size(); ++i)
      contexts[i].set_slice(previous ? &(*previous)[i] : nullptr, position_offset);
  MemoryCategoryScope scope(MemoryCategory::kActivations);
  for (int i = 0; i < num_layers(); ++i) x = layers[static_cast<size_t>(begin_ + i)]->forward(x, contexts[i]);
  return x;
}

float Stage::loss_forward(const Tensor& output, const Tensor& targets, float scale, SavedContext& loss_context) const {
  PF_INTERNAL_CHECK(has_loss_, "stage ", index_, " has no loss");
  MemoryCategoryScope scope(MemoryCategory::kActivations);
  return model_->loss().forward(output, targets, scale, loss_context);
}

int64_t Stage::count_correct(const Tensor& output, const Tensor& targets) const {
  PF_INTERNAL_CHECK(has_loss_, "stage ", index_, " has no loss");
  return model_->loss().count_correct(output, targets);
}

Tensor Stage::loss_backward(SavedContext& loss_context) const {
  PF_INTERNAL_CHECK(has_loss_, "stage ", index_, " has no loss");
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  Tensor grad = model_->loss().backward(loss_context);
  loss_context.clear();
  return grad;
}

Tensor Stage::backward(std::vector<SavedContext>& contexts, Tensor grad_output) const {
  check_contexts(contexts, "BW");
  const auto& layers = model_->layers();
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  for (int i = num_layers(); i-- > 0;)
    grad_output = layers[static_cast<size_t>(begin_ + i)]->backward(contexts[i], grad_output);
  return grad_output;
}

Tensor Stage::backward_input(std::vector<SavedContext>& contexts, Tensor grad_output) const {
  check_contexts(contexts, "B");
  const auto& layers = model_->layers();
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  for (int i = num_layers(); i-- > 0;)
    grad_output = layers[static_cast<size_t>(begin_ + i)]->backward_input(contexts[i], grad_output);
  return grad_output;
}

void Stage::backward_weight(std::vector<SavedContext>& contexts) const {
  check_contexts(contexts, "W");
  const auto& layers = model_->layers();
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  for (int i = num_layers(); i-- > 0;) layers[static_cast<size_t>(begin_ + i)]->backward_weight(contexts[i]);
}

std::vector<Stage> make_stages(const Model& model, const std::vector<std::pair<int, int>>& ranges) {
  std::vector<Stage> stages;
  const int n = static_cast<int>(ranges.size());
  stages.reserve(ranges.size());
  for (int s = 0; s < n; ++s) stages.emplace_back(model, s, n, ranges[s].first, ranges[s].second);
  return stages;
}

}  // namespace pf
