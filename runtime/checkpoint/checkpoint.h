// Checkpoints: parameters, optimizer state, step and data position in one versioned file.
//
// Layout (version 1): "PFCKPT\0\1" magic (8 bytes) | u32 format version | u64 header length |
// header JSON | tensor bytes | SHA-256 of everything before it (32 bytes).
// The header lists every tensor (name, dtype, shape, offset, bytes), the optimizer config and step,
// the trainer step and data position, and the model JSON.
//
// Writing is atomic: the file is written under a temporary name in the same folder, flushed to
// disk, then renamed over the target; a crash mid-write leaves the previous checkpoint intact.
#pragma once

#include <string>

#include "runtime/train/trainer.h"

namespace pf {

constexpr uint32_t kCheckpointFormatVersion = 1;

void save_checkpoint(const Trainer& trainer, const std::string& path);
// Loads into a trainer whose model has the same parameters (names and shapes). A missing, truncated
// or corrupted file, or one that does not match the model, throws (kNotFound, kDataLoss or
// kInvalidArgument) naming the file and the problem; the trainer is unchanged in that case.
// The optimizer kind must match; its hyperparameters (lr, betas, ...) are the trainer's own, so a
// resumed run may change the learning rate. Restored: parameters, optimizer state and step count,
// trainer step and data position.
void load_checkpoint(Trainer& trainer, const std::string& path);

}  // namespace pf
