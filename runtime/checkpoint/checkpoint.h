// Checkpoints: parameters, optimizer state, step and data position in one versioned file.
//
// Layout (version 1): "PFCKPT\0\1" magic (8 bytes) | u32 format version | u64 header length |
// header JSON | tensor bytes | SHA-256 of everything before it (32 bytes).
// The header lists every tensor (name, dtype, shape, offset, bytes), the optimizer config and step,
// the trainer step and data position, and the model JSON.
//
// Writing is atomic: the file is written under a temporary name in the same folder, flushed to
// disk, then renamed over the target; a crash mid-write leaves the previous checkpoint intact, and
// the next save removes the temporary file it left (checkpoint_file.h). A path that is a symlink,
// directory or device is never replaced, and parameters or state holding NaN or infinity are not
// saved (kFailedPrecondition naming the tensor and step).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/train/trainer.h"

namespace pf {

constexpr uint32_t kCheckpointFormatVersion = 1;

void save_checkpoint(const Trainer& trainer, const std::string& path);
// Loads into a trainer whose model has the same parameters (names and shapes). The SHA-256 only
// detects accidents (anyone can recompute it), so every header field is checked as untrusted
// input: the file must be a regular file no longer than this model's checkpoint can be; every
// entry must be well formed, lie inside the data section, appear once, be f32, and be a parameter
// of the model or a state slot of the trainer's optimizer (optimizer_slot_names) with its
// parameter's shape; step, data position and optimizer steps must lie in [0, 2^53]. A missing file
// is kNotFound; a malformed or inconsistent one kDataLoss naming the file and the entry; an intact
// checkpoint of another model (a parameter missing, extra or of another shape) kInvalidArgument
// naming the parameter. The trainer is unchanged in every such case.
// The optimizer kind must match; its hyperparameters (lr, betas, ...) are the trainer's own, so a
// resumed run may change the learning rate. Restored: parameters, optimizer state and step count,
// trainer step and data position.
void load_checkpoint(Trainer& trainer, const std::string& path);

// The header of a checkpoint file, read alone: "model" (Model::to_json, an object), "run" (the
// front-end's description, Trainer::run_description, an object when present), step, optimizer.
// A regular file (no symbolic link), the magic and version checked, a header of at most
// limits::kMaxCheckpointHeaderBytes inside the file, JSON depth-checked before parsing. The data
// and the checksum are not read: load_checkpoint checks them when it loads. kNotFound for a missing
// file; kDataLoss naming the file otherwise. Untrusted: the caller checks what it uses.
nlohmann::json read_checkpoint_header(const std::string& path);

// The pieces of save_checkpoint / load_checkpoint that sharded checkpoints (one file per process,
// sharded_checkpoint.h) are made of.
//
// The checkpoint file of `params` (and their optimizer state) with the trainer's step and data
// position; `path` names it in messages (kFailedPrecondition for NaN or infinite values).
std::string encode_checkpoint(const Trainer& trainer, const std::vector<Parameter*>& params, const std::string& path);
// One tensor of a checkpoint file: "param/<name>" or "optim/<name>/<slot>", its value and the
// parameter it belongs to. A file always holds whole tensors (a split parameter's whole_shape).
struct CheckpointEntry {
  std::string name;
  const Tensor* tensor;
  const Parameter* parameter;
};
// What encode_checkpoint writes for `params`: their values, then their optimizer slots.
std::vector<CheckpointEntry> checkpoint_entries(const Trainer& trainer, const std::vector<Parameter*>& params);
// The checkpoint file of these entries (the tensors as given) with the trainer's step, data
// position, optimizer and model description.
std::string encode_checkpoint_entries(const Trainer& trainer, const std::vector<CheckpointEntry>& entries,
                                      const std::string& path);
// A checkpoint file read and checked as load_checkpoint checks it (every entry a parameter of the
// trainer's model or a state slot of its optimizer), whatever subset of the parameters it holds.
struct CheckpointImage;
std::shared_ptr<const CheckpointImage> read_checkpoint_image(const Trainer& trainer, const std::string& path);
int64_t checkpoint_image_step(const CheckpointImage& image);
int64_t checkpoint_image_data_position(const CheckpointImage& image);
int64_t checkpoint_image_optimizer_steps(const CheckpointImage& image);
bool checkpoint_image_has_parameter(const CheckpointImage& image, const std::string& name);
std::string checkpoint_image_sha256(const CheckpointImage& image);  // of the whole file, hex
// Copies each of `wanted` and its optimizer state from the first image that has it (the optimizer
// state is replaced by what the images hold for `wanted`) and restores the progress counters.
// kInvalidArgument naming a wanted parameter no image has, before anything changes.
void apply_checkpoint_images(Trainer& trainer, const std::vector<const CheckpointImage*>& images,
                             const std::vector<Parameter*>& wanted, int64_t step, int64_t data_position,
                             int64_t optimizer_steps);

}  // namespace pf
