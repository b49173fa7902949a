// Checkpoints of a model split over a tensor-parallel group (docs/EXECUTION.md, "Tensor
// parallelism"). A checkpoint file always holds whole tensors, so it resumes at any T, in one
// process too, and a whole model's checkpoint resumes split: loading takes each member's slice
// (apply_checkpoint_images), saving gathers the slices here.
#pragma once

#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/tensor_parallel/group.h"
#include "runtime/train/trainer.h"

namespace pf {

// The checkpoint entries of `params` (checkpoint_entries) with every split parameter's value and
// optimizer slots gathered whole from the members of `group` (a collective: every member calls it
// with the same parameters). `tensors` holds the gathered tensors the entries point into.
struct WholeEntries {
  std::vector<Tensor> tensors;
  std::vector<CheckpointEntry> entries;
};
WholeEntries gather_whole_entries(const Trainer& trainer, const std::vector<Parameter*>& params,
                                  TensorParallelGroup& group);

// The sequential trainer of a split model: the whole model's single file (save_checkpoint's
// format), written by member 0 from every member's gathered slices; the others learn whether it
// did (an error on one member is an error on all).
void save_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path);

}  // namespace pf
