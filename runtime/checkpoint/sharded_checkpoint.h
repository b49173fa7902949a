// Checkpoints of a trainer in one process or spread over processes (docs/CHECKPOINTS.md).
//
// One process (SequentialTrainer, PipelineTrainer on threads): one file, save_checkpoint's.
// One process per rank (PipelineTrainer with a World): a folder, written collectively:
//   <folder>/step-<step>.rank-<r>.pfck  one shard per pipeline rank: that rank's parameters and
//                                       optimizer state in the single-file format (replica 0 of a
//                                       data-parallel run writes them; the replicas are equal)
//   <folder>/manifest.json              written last by rank 0 (atomic rename): the step, data
//                                       position and each shard's file, SHA-256 and parameters.
// The manifest makes the checkpoint complete: a run killed mid-save leaves the previous manifest
// and its shards (other steps' file names) in place; shards no manifest names are removed after a
// save. Across machines the folder must be on a file system every process sees.
//
// Loading reads either form into any trainer of the same model: each process picks its own
// parameters by name from whichever shards hold them, so a checkpoint saved under one pipeline
// degree, partition or data-parallel degree loads under another (or into one process). A missing,
// damaged or foreign shard is kDataLoss naming it; with a World every process agrees before any
// changes anything (an error on one rank is an error on all).
#pragma once

#include <string>

#include "runtime/train/trainer.h"

namespace pf {

void save_trainer_checkpoint(Trainer& trainer, const std::string& path);
void load_trainer_checkpoint(Trainer& trainer, const std::string& path);

}  // namespace pf
