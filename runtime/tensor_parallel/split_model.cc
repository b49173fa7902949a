#include "runtime/tensor_parallel/split_model.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/execution/partition.h"

namespace pf {
namespace {

// "layers[3] 'fc1' (linear)"
std::string describe(const Layer& layer, size_t index) {
  return "layers[" + std::to_string(index) + "] '" + layer.name() + "' (" + layer.type() + ")";
}

// Refuses a "parallel" annotation below the top level: the chain check sees top-level layers only.
void refuse_nested_splits(const nlohmann::json& layer, const std::string& path, bool top) {
  if (!layer.is_object()) return;
  if (!top && layer.contains("parallel"))
    fail(ErrorCode::kInvalidArgument, path, ": a tensor-parallel split inside a ", "residual or sequential layer ",
         "is not supported yet; split top-level linears only");
  for (const char* key : {"layers", "shortcut"}) {
    if (!layer.contains(key) || !layer[key].is_array()) continue;
    for (size_t i = 0; i < layer[key].size(); ++i)
      refuse_nested_splits(layer[key][i], path + "." + key + "[" + std::to_string(i) + "]", false);
  }
}

bool has_annotation(const Model& model) {
  for (const auto& layer : model.layers())
    if (layer->tensor_split() != TensorSplit::kNone) return true;
  return false;
}

// The default splits: column / row pairs of top-level linears joined by element-wise layers, both
// in the same stage; then a language model's vocabulary: when the first layer (a token embedding)
// takes a vocabulary split into `parts`, the last (the head) takes one too if it can.
void choose_default_splits(const Model& model, const std::vector<exec::StageRange>& stages, int parts) {
  const auto& layers = model.layers();
  for (const exec::StageRange& stage : stages)
    for (size_t i = static_cast<size_t>(stage.begin), end = static_cast<size_t>(stage.end); i < end; ++i) {
      size_t j = i + 1;
      while (j < end && layers[j]->elementwise()) ++j;
      if (j >= end) break;
      if (!layers[i]->choose_tensor_split(TensorSplit::kColumn, parts)) continue;
      if (!layers[j]->choose_tensor_split(TensorSplit::kRow, parts)) {
        layers[i]->choose_tensor_split(TensorSplit::kNone, parts);
        continue;
      }
      i = j;
    }
  Layer& first = *layers.front();
  if (layers.size() < 2 || first.tensor_split() != TensorSplit::kNone) return;
  if (!first.choose_tensor_split(TensorSplit::kVocab, parts)) return;
  if (first.splits_classes()) {  // a linear would be a head, not a token embedding
    first.choose_tensor_split(TensorSplit::kNone, parts);
    return;
  }
  if (layers.back()->tensor_split() == TensorSplit::kNone) layers.back()->choose_tensor_split(TensorSplit::kVocab, parts);
}

// The chain of one stage [begin, end); `last`: the stage whose output reaches the loss. Returns
// true when a vocabulary-parallel head's logits reach the loss split by classes.
bool check_chain(const Model& model, size_t begin, size_t end, bool last) {
  const auto& layers = model.layers();
  const Layer* open = nullptr;  // the column split (or vocabulary-parallel head) whose output is still split
  size_t open_index = 0;
  for (size_t i = begin; i < end; ++i) {
    const Layer& layer = *layers[i];
    const TensorSplit split = layer.tensor_split();
    if (open != nullptr) {
      if (split == TensorSplit::kRow && !open->splits_classes()) {
        open = nullptr;
      } else if (open->splits_classes() && !layer.elementwise()) {
        fail(ErrorCode::kInvalidArgument, "tensor parallelism: ", describe(layer, i),
             " takes the logits of the vocabulary-parallel ", describe(*open, open_index),
             ", which stay split by classes; only element-wise layers may come between a vocabulary-parallel head "
             "and the loss");
      } else if (!layer.elementwise()) {
        fail(ErrorCode::kInvalidArgument, "tensor parallelism: ", describe(layer, i),
             " takes the column-split output of ", describe(*open, open_index),
             "; only element-wise layers (relu, gelu) may come between a column-parallel linear and the "
             "row-parallel linear that consumes its output");
      }
    } else if (split == TensorSplit::kColumn || layer.splits_classes()) {
      open = &layer;
      open_index = i;
    } else if (split == TensorSplit::kRow) {
      fail(ErrorCode::kInvalidArgument, "tensor parallelism: the row-parallel ", describe(layer, i),
           " has no column-parallel linear before it to split its input");
    }
  }
  if (open == nullptr) return false;
  if (open->splits_classes() && last) return true;
  if (open->splits_classes())
    fail(ErrorCode::kInvalidArgument, "tensor parallelism: the logits of the vocabulary-parallel ",
         describe(*open, open_index), " would cross the pipeline stage boundary after ", describe(*layers[end - 1], end - 1),
         "; a vocabulary-parallel head belongs to the last stage, before the loss");
  if (last)
    fail(ErrorCode::kInvalidArgument, "tensor parallelism: the column-split output of ", describe(*open, open_index),
         " reaches the loss; end the split with a row-parallel linear, or make it the vocabulary-parallel head ",
         "(\"parallel\": \"vocab\") of a cross-entropy loss");
  fail(ErrorCode::kInvalidArgument, "tensor parallelism: the column-split output of ", describe(*open, open_index),
       " would cross the pipeline stage boundary after ", describe(*layers[end - 1], end - 1),
       "; end the split with a row-parallel linear in the same stage, or move the boundary (layers_per_stage)");
}

// A tied copy and its primary are split alike (the vocabulary-parallel embedding and head), or
// neither is: their gradients are summed element by element.
void check_tied_splits(Model& model) {
  for (const Parameter* p : model.parameters()) {
    if (p->tied_to.empty()) continue;
    const Parameter* primary = model.find_parameter(p->tied_to);
    if (primary == nullptr) continue;  // tied across stages: checked where the stages are built
    const bool alike = p->shard.split() == primary->shard.split() &&
                       (!p->shard.split() || (p->shard.dim == primary->shard.dim && p->shard.parts == primary->shard.parts));
    PF_CHECK_ARG(alike, "tensor parallelism: '", p->name, "' is tied to '", primary->name, "', but ",
                 p->shard.split() ? "only the copy" : "only the primary", " is split across the group; split both by ",
                 "the vocabulary (\"parallel\": \"vocab\" on the embedding and on the head) or neither");
  }
}

// Sequence parallelism: the activations between the split layers are the members' sequence steps,
// so the model must start from token ids split by the vocabulary-parallel embedding (which sums its
// rows into the members' steps) and end at the vocabulary-parallel head (which all-gathers the
// steps before its GEMM), and every layer between must work step by step or gather the steps
// itself (the blocks and attention through their split linears).
void check_sequence_parallel(const Model& model) {
  const auto& layers = model.layers();
  const Layer& first = *layers.front();
  PF_CHECK_ARG(std::string(first.type()) == "embedding" && first.tensor_split() == TensorSplit::kVocab,
               "sequence parallelism: the first layer must be a vocabulary-parallel token embedding (a language ",
               "model whose vocabulary T divides), got ", describe(first, 0),
               first.tensor_split() == TensorSplit::kNone ? " kept whole" : "");
  PF_CHECK_ARG(layers.size() >= 2 && layers.back()->splits_classes(), "sequence parallelism: the last layer must be ",
               "the vocabulary-parallel head (a linear whose outputs T divides, before a cross_entropy loss), got ",
               describe(*layers.back(), layers.size() - 1));
  static const char* const kStepwise[] = {"transformer_block", "llama_block", "attention", "layernorm", "rmsnorm",
                                           "linear"};
  for (size_t i = 1; i + 1 < layers.size(); ++i) {
    const Layer& layer = *layers[i];
    bool known = layer.elementwise();
    for (const char* type : kStepwise) known = known || std::string(layer.type()) == type;
    PF_CHECK_ARG(known, "sequence parallelism: ", describe(layer, i), " would see only this member's sequence ",
                 "steps; between the embedding and the head only transformer_block, llama_block, attention, ",
                 "layernorm, rmsnorm, linear and element-wise layers may come");
  }
}

}  // namespace

void split_model_for_tensor_parallel(Model& model, std::shared_ptr<TensorParallelGroup> group,
                                     const std::vector<int>& layers_per_stage) {
  PF_CHECK_ARG(group != nullptr, "tensor parallelism: the group is null");
  PF_CHECK_ARG(model.tensor_parallel_group() == nullptr, "tensor parallelism: the model is already split");
  if (group->size() == 1) return;
  const nlohmann::json description = model.to_json();
  if (description.contains("layers") && description["layers"].is_array())
    for (size_t i = 0; i < description["layers"].size(); ++i)
      refuse_nested_splits(description["layers"][i], "layers[" + std::to_string(i) + "]", true);
  const int layers = static_cast<int>(model.layers().size());
  const std::vector<exec::StageRange> stages = exec::partition_layers(
      layers, layers_per_stage.empty() ? 1 : static_cast<int>(layers_per_stage.size()), layers_per_stage);
  if (!has_annotation(model)) choose_default_splits(model, stages, group->size());
  if (group->sequence_parallel()) check_sequence_parallel(model);
  bool split_logits = false;
  for (size_t s = 0; s < stages.size(); ++s)
    split_logits = check_chain(model, static_cast<size_t>(stages[s].begin), static_cast<size_t>(stages[s].end),
                               s + 1 == stages.size());
  PF_CHECK_ARG(!split_logits || model.loss().split_classes(group), "tensor parallelism: the loss '", model.loss().type(),
               "' cannot take logits split by classes (the vocabulary-parallel ", describe(*model.layers().back(),
               model.layers().size() - 1), "); only cross_entropy can");
  for (const auto& layer : model.layers()) layer->split_for_tensor_parallel(group);
  check_tied_splits(model);
  bool split = false;
  for (const Parameter* p : model.parameters()) split = split || p->shard.split();
  PF_CHECK_ARG(split, "tensor parallelism: no layer of this model splits across the ", group->size(),
               " members (what splits: transformer_block layers, linears with \"parallel\", and pairs of ",
               "top-level linears joined by element-wise layers); every member would hold the whole model");
  model.set_tensor_parallel_group(std::move(group));
}

}  // namespace pf
