// Splitting a model's top-level layers into pipeline stages. A stage is a contiguous range of
// top-level layers; the embedding (the first layer) is on the first stage and the loss
// (Model::loss()) runs after the last stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/train/batch.h"

namespace pf::exec {

struct StageRange {
  int begin = 0;  // first top-level layer index
  int end = 0;    // one past the last
  int size() const { return end - begin; }
};

// `layers_per_stage` empty: an even split (the first num_layers % num_stages stages get one more).
// Otherwise it must have num_stages entries, each >= 1, summing to num_layers.
// Errors (kInvalidArgument) name the stage and the counts.
std::vector<StageRange> partition_layers(int num_layers, int num_stages,
                                         const std::vector<int>& layers_per_stage = {});

// Contiguous split of `layer_costs` into num_stages non-empty ranges minimising the most expensive
// range (dynamic programming, O(S * L^2)); ties go to the split with the earliest boundaries.
std::vector<StageRange> partition_balanced(const std::vector<double>& layer_costs, int num_stages);

// Each top-level layer's parameter count (shapes only: unallocated parameters count too).
std::vector<int64_t> layer_parameter_counts(const Model& model);

// The split balancing parameter counts (partition_balanced over layer_parameter_counts; what
// DeepSpeed calls partition_method "parameters"): for models whose layers' compute follows their
// parameters, such as a GPT's blocks, a balanced split without measuring anything.
std::vector<StageRange> partition_by_parameters(const Model& model, int num_stages);

// The layer counts of a partition (the form PipelineOptions::layers_per_stage takes).
std::vector<int> layer_counts(const std::vector<StageRange>& stages);

// Measured seconds per top-level layer for one forward + fused backward of `sample` (median of
// `repeats` runs; the loss is charged to the last layer). Parameter gradients are left modified.
std::vector<double> measure_layer_times(Model& model, const Batch& sample, int repeats = 3);

}  // namespace pf::exec
