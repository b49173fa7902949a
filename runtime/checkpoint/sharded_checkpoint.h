// Checkpoints of a trainer in one process or spread over processes (docs/CHECKPOINTS.md).
//
// One process (SequentialTrainer, PipelineTrainer on threads): one file, save_checkpoint's.
// A model split over a tensor-parallel group: files hold whole tensors, gathered from the members
// (tensor_parallel_checkpoint.h); member 0 writes them, and a loading member takes its slices.
// One process per rank (PipelineTrainer with a World): a folder, written collectively:
//   <folder>/step-<step>.rank-<r>.<save>.pfck  one shard per pipeline rank (<save>: 16 hex digits,
//                                       new for every save): that rank's parameters and
//                                       optimizer state in the single-file format (replica 0 of a
//                                       data-parallel run writes them; the replicas are equal;
//                                       tensor-parallel rank 0 the whole tensors of its group)
//   <folder>/manifest.json              written last by rank 0 (atomic rename): the step, data
//                                       position and each shard's file, SHA-256 and parameters.
// The manifest makes the checkpoint complete: every save writes new shard files and publishes them
// by renaming the new manifest over the old one, so a save that fails or is killed anywhere (a full
// disk, one rank's write) leaves the previous manifest and its shards loadable; the failed save's
// shards are removed, and shards no manifest names are removed after a successful save. (Until
// 0.11 a re-save of the same step overwrote the shards the old manifest named.) Across machines the folder must be on a file system every process sees.
//
// Loading reads either form into any trainer of the same model: each process picks its own
// parameters by name from whichever shards hold them, so a checkpoint saved under one pipeline
// degree, partition or data-parallel degree loads under another (or into one process). A missing,
// damaged or foreign shard is kDataLoss naming it; with a World every process agrees before any
// changes anything (an error on one rank is an error on all).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "runtime/train/trainer.h"

namespace pf {

void save_trainer_checkpoint(Trainer& trainer, const std::string& path);
void load_trainer_checkpoint(Trainer& trainer, const std::string& path);
// The header of a checkpoint (either form: a file, or a folder whose manifest names the shards:
// its first shard's), as read_checkpoint_header reads it.
nlohmann::json checkpoint_header(const std::string& path);

}  // namespace pf
