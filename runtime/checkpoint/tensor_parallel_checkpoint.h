// Checkpoints of a tensor-parallel member's trainer (docs/EXECUTION.md, "Tensor parallelism"): the
// whole model's single file, save_checkpoint's format, so it resumes at any T, in one process too,
// and a whole model's checkpoint resumes split.
//
// Saving is collective over the group: every member's slices (values and optimizer state) are
// gathered and put in their places in a whole copy of the model; member 0 writes the file and the
// others learn whether it did (an error on one member is an error on all). Loading: every member
// reads the file into a whole copy of the model (load_checkpoint's checks) and keeps its slices.
// Every member holds the whole model while it saves or loads.
#pragma once

#include <string>

#include "runtime/train/trainer.h"

namespace pf {

// The trainer's model must be split (Model::tensor_parallel_group) and the trainer sequential.
void save_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path);
void load_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path);

}  // namespace pf
