// Moving a synchronous pipelined trainer to another partition live, in memory (docs/PLANNING.md
// "Adapting to a slow rank"): the trainer is rebuilt over the same model with the new
// layers_per_stage, and every parameter's value and optimizer state slots, the optimizer's step
// count and the progress (step, data position) carry over. Nothing goes through files.
//
// Ranks as threads of one process: every parameter is local, so the state is copied in memory.
// One process per rank (options().world): each parameter whose owner rank changes is broadcast
// over the world from its old owner (the root), first its name, element count and the slots it has,
// then its value and slots in one buffer; the new owner checks the name and size against its own
// model (a mismatch is kInvalidArgument naming the parameter and both ranks on every process) and
// takes them. A process that loses every parameter of a layer releases them (the new trainer holds
// only its stages); one that gains a layer allocates it. Every call of the move takes the trainer's
// recv_timeout_seconds: a peer that dies or stops answering is an Error naming this rank and the
// parameter being moved (kTimeout, kCancelled or kMpiError), and this process aborts the world so
// that the others stop within moments rather than at their timeouts; the trainer is then unusable.
// Every process of the world must call it at the same step with the same partition.
#pragma once

#include <memory>
#include <vector>

#include "runtime/execution/pipeline_trainer.h"

namespace pf::plan {

// Replaces *trainer by a trainer of the same options but `layers_per_stage`, carrying its state.
void repartition(std::unique_ptr<exec::PipelineTrainer>* trainer, const std::vector<int>& layers_per_stage);

}  // namespace pf::plan
