// Overlapping steps (TrainingConfig::overlap_steps; docs/EXECUTION.md, "Overlapping steps"): the
// steps handed to this process's ranks and how far each rank is with them. A run of consecutive
// steps is one job on every rank's worker: a rank runs its action list of step n, reports its
// gradients final, waits until step n is *committed* (the caller asked for it, and the gradient
// norm is known where clipping needs it), applies its own update and goes on to step n + 1 as soon
// as that step's micro-batches are here — while later ranks still finish step n. Nothing a rank does
// for a step that was never committed changes a parameter, so abandoning it loses nothing.
//
// Threads: the trainer's main thread pushes and commits steps and waits; each worker calls next(),
// gradients_final(), wait_committed() and updated() for its rank. Every wait also ends when
// `stopped()` (the trainer's: the rank group was cancelled, or the run abandoned) says so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/execution/rank_executor.h"
#include "runtime/train/batch.h"

namespace pf::exec {

class StepOverlap {
 public:
  struct Step {
    int64_t number = 0;                 // the trainer's step count before it
    std::vector<Batch> micro;           // its micro-batches (this replica's, or units)
    int64_t source_start = 0;           // where they began in the data source
    int64_t samples = 0, tokens = 0;    // rows and target elements of its micro-batches
    std::chrono::steady_clock::time_point t0;  // when it was handed to the ranks
    std::vector<RankExecutor::StepOutput> outputs;  // [rank]
    // Set by the main thread when it commits the step.
    bool committed = false;
    bool keep = false;  // post-validation: each rank keeps what its update changes
    int gradients_final = 0;  // local ranks whose gradients of this step are final
    int updated = 0;          // local ranks that applied its update
  };

  // `local_ranks`: how many ranks this process runs; `stopped`: polled by every wait.
  StepOverlap(int local_ranks, std::function<bool()> stopped);

  // ---- Main thread.
  // Hands a step to the ranks (its number must follow the last one's); returns it.
  Step& push(std::unique_ptr<Step> step);
  // The oldest step not yet finished (null when none is in flight).
  Step* front();
  Step* back();
  size_t in_flight() const;
  // Lets the ranks apply the step's update (with the unclipped gradients); with `keep` each rank
  // keeps what the update changes, so that it can be redone (post-validation).
  void commit(Step& step, bool keep);
  // Ends the run after `number`: the ranks' job returns once they have updated for it.
  void end_after(int64_t number);
  // Waits until every local rank's gradients of `step` are final / every local rank updated for
  // it; false when stopped first.
  bool wait_gradients_final(const Step& step);
  bool wait_updated(const Step& step);
  // Drops the oldest step (finished) / every step (the run ended or was abandoned).
  void pop_front();
  void clear();

  // ---- A rank's worker.
  // Step `number`, waiting until it is pushed; null when the run ends before it or was stopped.
  Step* next(int64_t number);
  void gradients_final(Step& step);
  // False when stopped before the step was committed (the step is abandoned).
  bool wait_committed(const Step& step);
  void updated(Step& step);

  // Every wait ends (false / null): the step begun ahead is abandoned. A rank already running its
  // actions finishes them first (so that every process's ranks exchange all of that step's
  // messages), then returns without updating. clear() makes the next run possible.
  void abandon();
  // Rank-steps begun while an earlier step was still unfinished on some rank (since construction).
  int64_t begun_early() const;

 private:
  template <typename Ready>
  bool wait(std::unique_lock<std::mutex>& lock, Ready ready);

  const int local_ranks_;
  std::function<bool()> stopped_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Step>> steps_;
  int64_t last_ = -1;  // end_after's step; -1: the run goes on
  bool abandoned_ = false;
  int64_t begun_early_ = 0;
};

}  // namespace pf::exec
