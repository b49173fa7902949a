// The planner's partition: top-level layers into contiguous stages, non-uniform, by dynamic
// programming over the profiled layer costs, minimising the slowest stage's F + B + W while every
// stage's memory (its parameters' bytes plus its in-flight contexts' bytes) fits a per-stage limit.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/planner/model_profile.h"

namespace pf::plan {

// What a stage of layers [begin, end) costs per micro-batch.
struct StageCosts {
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  double activation_bytes = 0;      // the stage's context from F to B (shared tensors once)
  double weight_pending_bytes = 0;  // from B to W
  double input_bytes = 0;           // what arrives from the previous stage (0 for the first)
  int64_t parameters = 0;
  // Tensor parallelism: the members' all-reduces in F and in B (LayerCosts::tensor_parallel_*_s).
  double tensor_parallel_forward_s = 0, tensor_parallel_backward_s = 0;
  double seconds() const {
    return forward_s + backward_input_s + backward_weight_s + tensor_parallel_forward_s + tensor_parallel_backward_s;
  }
};
StageCosts stage_costs(const MicroBatchCosts& costs, int begin, int end);

struct PartitionLimits {
  // Per stage: contexts of one micro-batch the stage holds at its peak (its rank's schedule);
  // empty: no memory constraint.
  std::vector<double> contexts;
  double bytes_per_parameter = 0;  // value, gradient and optimizer state
  double stage_limit_bytes = 0;    // what one stage may take; 0: no limit
  // Per stage: a factor on its F + B + W (its rank's slowdown: a fail-slow device); empty: 1.
  std::vector<double> stage_time_factor;
};

// Layer counts of `num_stages` contiguous non-empty stages (O(stages x layers^2)); ties go to the
// earliest boundaries. Empty when no split fits the limits (or layers < num_stages).
std::vector<int> partition_for_plan(const MicroBatchCosts& costs, int num_stages, const PartitionLimits& limits);

}  // namespace pf::plan
