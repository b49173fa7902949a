// A training run: `steps` optimizer steps on a data source with, when asked, evaluation on a
// held-out source every N steps, a checkpoint every N steps into a series keeping the newest K,
// and the metrics log. The learning-rate schedule is the trainer's (TrainerOptions::lr_schedule).
// The command line, the C API (pf_trainer_run) and the bindings all run this loop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "runtime/train/trainer.h"

namespace pf {

struct StepReport;

struct TrainingLoopOptions {
  int64_t steps = 0;               // further steps to take (>= 0)
  int64_t eval_every = 0;          // > 0: evaluate after every eval_every-th step and after the last
  int eval_micro_batches = 1;      // micro-batches per evaluation (from the held-out source's start)
  int64_t checkpoint_every = 0;    // > 0: a checkpoint after every checkpoint_every-th step and the last
  std::string checkpoint_dir;      // the series' folder (needed with checkpoint_every)
  int keep_checkpoints = 0;        // newest checkpoints kept (0 = all)
  std::string metrics_log;         // "" = none; a JSON Lines file (runtime/run/metrics_log.h)
  // More fields for the metrics-log line of a step (called with the trainer's step count after it;
  // an object, or null for none): e.g. the re-partition an adaptive trainer made in that step.
  std::function<nlohmann::json(int64_t step)> log_fields;
  bool writes_files = true;        // false on processes other than the leader: they save their
                                   // shards collectively but write no log and remove nothing
  bool sharded_checkpoints = false;  // one process per rank: checkpoints are folders
  // Asked after every step but the last with its report so far (step and result): true ends the
  // run at that step as if it were the last: the series' checkpoint is written for it (no
  // evaluation), on_step sees it with `stopped` set, and the loop returns. The command line's
  // SIGINT/SIGTERM, the C API's on_step callback; with one process per rank the answer must be the
  // same on every process (the caller agrees on it, e.g. by a reduction).
  std::function<bool(const StepReport&)> should_stop;
  // How the caller spells the fields in messages (the C API: "options->"); run_training checks
  // them once, with validate().
  std::string field_prefix;
  void validate() const;           // kInvalidArgument naming the field
};

// What the loop reports after each step (to on_step) and at the end.
struct StepReport {
  int64_t step = 0;                 // the trainer's step count after this step
  StepResult result;
  std::optional<EvalResult> eval;   // when this step evaluated
  std::string checkpoint;           // the path saved after this step, or ""
  bool stopped = false;             // should_stop() ended the run after this step
  // Why the run diverged at this step, "" when it did not: the loss, the gradient norm or a
  // parameter after the update is NaN or infinite, e.g. "parameter 'fc1.weight' has an infinity at
  // element 3 after the update" (the same on every process of a pipeline).
  std::string divergence;
};

// Runs the loop. on_step (may be empty) sees every step's report and returns false to stop early.
// A diverged step (StepReport::divergence: a non-finite loss, gradient norm or parameter) stops
// the run too, with no evaluation and no checkpoint written for it: the newest checkpoint on disk
// stays the last good one. Parameters are checked after every step (the ones this process holds;
// with one process per rank the processes then agree in one reduction). Evaluation seeks the
// held-out source to 0 first, so every evaluation sees the same micro-batches. Returns the last
// step's report (step == the trainer's step before the call when steps is 0).
StepReport run_training(Trainer& trainer, DataSource& train, DataSource* held_out, const TrainingLoopOptions& options,
                        const std::function<bool(const StepReport&)>& on_step);

}  // namespace pf
