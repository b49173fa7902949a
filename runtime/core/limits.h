// The limits on sizes that come from input: model JSON, schedule text, checkpoints and the C API's
// options. Each is checked before anything of that size is allocated, and the error names the
// field or line and the limit. docs/LIMITS.md lists them with the reasons for their values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pf::limits {

// --- Tensors and models ---------------------------------------------------------------------
// One tensor dimension: BLAS takes its sizes as int.
constexpr int64_t kMaxDimension = INT32_MAX;
// Layers in one model, nested layers included.
constexpr int64_t kMaxLayers = 100000;
// A layer's name (no control characters either: names end up in checkpoints and on terminals).
constexpr size_t kMaxNameBytes = 256;
// Nesting of residual/sequential layers (the builders and to_json recurse once per level).
constexpr int kMaxLayerNesting = 32;
// A model's parameters may take at most this many bytes: a quarter of the memory this process may
// use (physical memory, a cgroup's memory.max or an address-space limit (`ulimit -v`), whichever is
// lowest), which leaves room for the gradients and AdamW's two moments of the same size.
int64_t max_parameter_bytes();

// A data set loaded whole (a CSV file's samples) may take at most this many bytes: half the memory
// this process may still allocate (as above, less what the address space already holds when
// `ulimit -v` is set). Evaluated at each call: loading happens once per run.
int64_t max_loaded_data_bytes();

// One tensor received from another process (MpiTransport): its header's size is checked against
// this before the tensor is allocated. Half the memory this process may use.
int64_t max_message_bytes();

// --- JSON text (model descriptions, checkpoint headers, layer options) ----------------------
// Brackets nested deeper than this are refused before parsing: nlohmann::json's dump and
// destructor recurse once per level.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxModelJsonBytes = size_t{64} << 20;
constexpr size_t kMaxCheckpointHeaderBytes = size_t{256} << 20;

// --- Schedules ------------------------------------------------------------------------------
constexpr int kMaxRanks = 4096;
constexpr int kMaxStages = 16384;  // ranks x chunks
constexpr int kMaxMicroBatches = 65536;
// Stages x micro-batches (e.g. 256 stages x 1024 micro-batches): bounds the actions of one schedule
// (about 3 to 5 per cell, more after lowering) and the validator's and simulator's dense tables
// (the validator's index takes about 360 bytes per cell: 94 MB at the limit).
constexpr int64_t kMaxScheduleCells = int64_t{1} << 18;
constexpr size_t kMaxScheduleTextBytes = size_t{64} << 20;

// --- Files read whole (runtime/core/input_file.h) ------------------------------------------
// Config and plan files, cluster and profile files, probe results: JSON of a few kilobytes, with
// room for an inline model description.
constexpr uint64_t kMaxConfigFileBytes = uint64_t{64} << 20;
// One character-text data file (read whole, then cut into rows).
constexpr uint64_t kMaxTextDataBytes = uint64_t{1} << 30;
// An existing metrics log that a resumed run keeps the earlier lines of, and one line of it.
constexpr uint64_t kMaxMetricsLogBytes = uint64_t{1} << 30;
constexpr size_t kMaxMetricsLogLineBytes = size_t{1} << 20;

// --- Checkpoints ----------------------------------------------------------------------------
// Trainer steps, optimizer steps and the data position: far above any real run, far below the
// point where step arithmetic (step + 1, bias corrections) could overflow.
constexpr int64_t kMaxStepCount = int64_t{1} << 53;

}  // namespace pf::limits
