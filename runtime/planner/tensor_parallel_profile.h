// The planner's view of tensor parallelism (docs/PLANNING.md, "Tensor parallelism"): which degrees
// T a model splits at and what each split layer costs a member, derived from the model's own split
// (split_model_for_tensor_parallel on a copy without tensors), and a micro-batch's layer costs at T.
#pragma once

#include "runtime/models/model.h"
#include "runtime/planner/model_profile.h"

namespace pf::plan {

// Splits copies of `model` (built without tensors) at T = 2 .. max_degree: the degrees that split
// (a T not dividing the heads or a split dimension is left out) and, per top-level layer, the split
// parameter elements and the floats per token its all-reduces carry (a column-parallel weight
// [out, in]: `in` in B; a row-parallel one: `out` in F). With a `sample` micro-batch it also
// measures, at each degree, what a member keeps (TensorParallelProfile::member_bytes): T members,
// threads of a ThreadWorld, each split a copy, allocate their slices and run one F, B, W pass on
// the sample, with and without sequence parallelism; a model that cannot split by sequence steps
// (split_model_for_tensor_parallel's kInvalidArgument), or a sample whose steps T does not
// divide, gets no sequence-parallel entry.
TensorParallelProfile profile_tensor_parallel(const Model& model, int max_degree = kMaxProfiledTensorParallel,
                                              const Batch* sample = nullptr);

// `costs` as one of T members runs them: each layer's F, B and W scaled by the share that stays
// (1 - s + s / T, s its split share of the parameters: the GEMMs split with their weights), its
// parameters 1 - s + s / T of them, and its all-reduces (T members on a link of `bandwidth` bytes/s
// and `latency` s, sched::ring_allreduce_time) in tensor_parallel_forward_s and
// tensor_parallel_backward_s (the calibration scales the compute, not these; with sequence
// parallelism a reduce-scatter and an all-gather move what the all-reduce did, so the same). The
// byte fields (activation, shared, weight-pending, input) become the measured member's,
// tensor_parallel.member(T, sequence_parallel) scaled by costs.rows / member_bytes_rows; without a
// measurement they stay whole (kInvalidArgument for sequence parallelism without one).
// kInvalidArgument when T is not one of tensor_parallel.degrees.
MicroBatchCosts tensor_parallel_costs(const TensorParallelProfile& tensor_parallel, MicroBatchCosts costs, int T,
                                      double bandwidth, double latency, bool sequence_parallel = false);

}  // namespace pf::plan
