// What a schedule family is, as data: each generator registers its traits with its name
// (generators.h), a generated Schedule carries them, and everything downstream (the trainer, the
// capability table, the planner, the command line) reads these fields instead of comparing names.
#pragma once

#include <string>

namespace pf::sched {

// Synchronous schedules flush every step; asynchronous and local-learning ones keep micro-batches
// in flight between steps (a step is a window, step_windows.h) and each stage updates itself.
enum class ScheduleFamily { kSynchronous, kAsynchronous, kLocalLearning };
// "synchronous", "asynchronous", "local-learning".
const char* schedule_family_name(ScheduleFamily family);

// When a stage applies its optimizer update: once per step (synchronous schedules, pipedream-2bw,
// local-updates) or after every micro-batch's backward (pipedream, spectrain, pipemare, ppll).
enum class UpdateInterval { kStep, kMicroBatch };

// Which weights the forwards and backwards of a windowed schedule use (runtime/execution/
// weight_versions.h has the rules); kNone for synchronous schedules.
enum class WeightVersioning { kNone, kPipeDream, kPipeDream2BW, kSpecTrain, kPipeMare, kLocal };

// How many model chunks per rank a generator takes (GeneratorOptions::chunks).
enum class ChunkRule {
  kOne,  // one stage per rank
  kAny,  // any v >= 1, looped placement (interleaved-1f1b, interleaved-zb, bfs)
  kTwo,  // the V schedules: always 2 (they accept 1, the default, or 2)
};

struct ScheduleTraits {
  ScheduleFamily family = ScheduleFamily::kSynchronous;
  UpdateInterval update_interval = UpdateInterval::kStep;
  WeightVersioning weights = WeightVersioning::kNone;
  // Keeps the weights each forward used, so a recomputed forward can rerun on them (pipedream,
  // pipedream-2bw); synchronous schedules recompute within the step, where the weights are fixed.
  bool stashes_weights = false;
  // Non-empty: why checkpoints of this schedule are not supported yet (what it would lose).
  std::string checkpoint_refusal;
  ChunkRule chunks = ChunkRule::kOne;
  // Generated from a cost model and a memory cap (zb-auto, v-half, v-min: ScheduleRequest::costs).
  bool cost_driven = false;
  // Runs each micro-batch as seq_slices slices of its sequence (seq1f1b).
  bool slices_sequences = false;
  // Copies of the model trained side by side (bitpipe: 2).
  int pipelines = 1;

  bool windowed() const { return family != ScheduleFamily::kSynchronous; }
  bool asynchronous() const { return family == ScheduleFamily::kAsynchronous; }
  bool local_learning() const { return family == ScheduleFamily::kLocalLearning; }
  bool checkpointable() const { return checkpoint_refusal.empty(); }
  // The chunks per rank a request of 0 chunks gets: 2 for the looped schedules (1 would not
  // interleave) and the V schedules, 1 for the others. The one default every front-end shares.
  int default_chunks() const { return chunks == ChunkRule::kOne ? 1 : 2; }
  // UPDATE after every update_every(m)-th backward of a stage, for steps of m micro-batches.
  int update_every(int micro_batches) const { return update_interval == UpdateInterval::kStep ? micro_batches : 1; }
  // "asynchronous schedule 'pipedream'", "local-learning schedule 'ppll'", "schedule '1f1b'".
  std::string describe(const std::string& name) const;
};

bool operator==(const ScheduleTraits& a, const ScheduleTraits& b);
inline bool operator!=(const ScheduleTraits& a, const ScheduleTraits& b) { return !(a == b); }

}  // namespace pf::sched
