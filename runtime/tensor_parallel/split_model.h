// Splits a model across a tensor-parallel group (docs/EXECUTION.md, "Tensor parallelism"): each
// member keeps its slice of every split layer (Linear's "parallel": "column" | "row") and the whole
// of every other layer.
#pragma once

#include <memory>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

// A model without any "parallel" annotation gets the default splits first: among its top-level
// layers, a linear followed, through element-wise layers only (relu, gelu), by another linear of the
// same pipeline stage makes a column / row pair (Megatron's MLP: fc1 column, fc2 row), scanning from
// the first layer; a linear left without a partner stays whole. A language model (its first layer
// a token embedding whose vocabulary T divides) gets Megatron's vocabulary-parallel embedding, and
// its last layer, when it is a linear with T dividing its outputs, becomes the vocabulary-parallel
// head whose logits the cross-entropy takes split by classes (TensorSplit::kVocab). Then checks
// each stage's chain and splits: between a column split and the row split that consumes its output
// only element-wise layers may come, a row split needs a column split before it, no column split
// may reach the loss or the end of its stage (a pipeline message carries whole activations), a
// vocabulary-parallel head is the last stage's and only element-wise layers follow it, a tied copy
// splits as its primary does; a split inside a residual or sequential is refused (not yet supported). transformer_block and llama_block layers
// split themselves (attention by heads, the MLP as a column / row pair). kInvalidArgument naming the
// layer otherwise, when T does not divide a split dimension, or when nothing in the model splits.
// Under sequence parallelism (group->sequence_parallel()) the first layer must be the vocabulary-
// parallel embedding, the last the vocabulary-parallel head, and each layer between one that works
// on the members' sequence steps (transformer_block, llama_block, attention, layernorm, rmsnorm,
// linear, element-wise); kInvalidArgument naming the layer otherwise.
// `layers_per_stage`: the top-level layers of each pipeline stage (empty: one stage).
//
// Call it once, before the trainer initialises the parameters. It allocates nothing: a split
// parameter that has a value gets a slice-sized one, and a parameter built without tensors
// (DeferParameterAllocation) stays so, for the trainer to allocate what this process holds
// (allocate_parameter gives a split parameter its slice). The model remembers the group
// (Model::tensor_parallel_group). A group of one changes nothing.
void split_model_for_tensor_parallel(Model& model, std::shared_ptr<TensorParallelGroup> group,
                                     const std::vector<int>& layers_per_stage = {});

}  // namespace pf
