// Trainer steps of schedules that never flush (asynchronous schedules, local learning): as an IR
// schedule such a generator's output is one *run* of m micro-batches that fills, runs the steady
// state and drains; a trainer step is a *window* of the steady state instead. cut_step_windows
// cuts the run of 3m micro-batches into per-rank action lists so that consecutive steps continue
// the pipeline without draining (the drain runs once, at the end of training).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// The per-rank action lists of the trainer steps, lowered (a RECV right before the action that
// consumes it, a SEND right after the one that produces it: sends are buffered, so a message may
// cross a step boundary). Micro-batch indices: a step's m micro-batches are slots [0, m) in even
// windows and [m, 2m) in odd ones, so that the previous window's micro-batches still in flight
// keep their own slots and message keys.
struct StepWindows {
  std::string name;
  int ranks = 0;
  int micro_batches = 0;  // m: micro-batches per step (window)
  // [rank]: the first window after an empty pipeline (parity 0), the steady windows by their
  // parity, and the drain after a window of each parity.
  std::vector<std::vector<Action>> first;
  std::vector<std::vector<Action>> steady[2];
  std::vector<std::vector<Action>> drain[2];
  // [stage]: updates of the stage between F(k) and BW(k) in the steady state (asynchronous
  // schedules; 0 otherwise).
  std::vector<int> update_delay;

  // Rank `rank`'s list for the step after `steps_since_fill` steps of a filled pipeline (0: first).
  const std::vector<Action>& step_list(int64_t steps_since_fill, int rank) const {
    return steps_since_fill == 0 ? first[static_cast<size_t>(rank)]
                                 : steady[steps_since_fill % 2][static_cast<size_t>(rank)];
  }
};

// The start of a schedule's unlowered run (async_run, local_run): one stage per rank, `ranks` empty
// lists. Throws kInvalidArgument naming the schedule unless ranks, micro_batches and update_every
// are >= 1.
Schedule start_run(const std::string& name, int ranks, int micro_batches, int update_every);

// Appends rank r's BW(k), then its UPDATE after every `update_every`-th micro-batch and after the
// run's last one.
void push_backward(std::vector<Action>& list, int rank, int k, int micro_batches, int update_every);

// `run(n)`: the schedule's unlowered run of n micro-batches, one stage per rank, every rank's list
// in micro-batch order of its forwards. Rank r's steady window runs from its F(m - lag[r]) to its
// F(2m - lag[r]) of the run of 3m (lag 0: its own forwards of the step; lag r: the micro-batches
// the previous rank forwarded, one step behind). Needs m >= every lag. `recompute`: a RECOMPUTE
// right before every BW. A local-learning schedule (one with HEAD actions) gets no backward
// messages.
StepWindows cut_step_windows(const std::string& name, int ranks, int micro_batches,
                             const std::function<Schedule(int)>& run, const std::vector<int>& lag, bool recompute);

// The steady state of a schedule that never flushes, under `costs`: the time per micro-batch once
// the pipeline is full, and what one run of m micro-batches adds to m of those (fill and drain),
// from two simulated runs (m and 2m micro-batches; `run(n)` as above).
struct SteadyState {
  double per_micro_batch = 0.0;
  double fill_and_drain = 0.0;
  double run_makespan = 0.0;  // one run of m micro-batches
};
SteadyState simulate_steady_state(const std::function<Schedule(int)>& run, int micro_batches, const CostModel& costs);

}  // namespace pf::sched
