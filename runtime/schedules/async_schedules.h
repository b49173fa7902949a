// Asynchronous schedules (docs/SCHEDULES.md, "Asynchronous schedules"): PipeDream (weight stashing),
// PipeDream-2BW, SpecTrain and PipeMare all run the 1F1B order without a flush: rank s does
// d_s = min(p-s-1, m) warm-up forwards, then alternates F(k), BW(k - d_s), and updates its stage
// with UPDATE actions instead of one STEP: after every BW (pipedream, spectrain, pipemare) or after
// the last BW of every batch of m micro-batches (pipedream-2bw). Which weights each F and BW uses is
// the executor's business (runtime/execution/weight_versions.h); the order is the same for all four.
//
// As an IR schedule, a generator's output is one *run* of m micro-batches: it fills, runs the steady
// state and drains. A trainer step is a *window* of the steady state: AsyncWindows cuts the run of
// 3m micro-batches into per-rank action lists so that consecutive steps continue the pipeline
// without draining (the drain runs once, at the end of training).
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// "pipedream", "pipedream-2bw", "spectrain", "pipemare" (registered generators).
const std::vector<std::string>& async_schedule_names();
bool is_async_schedule_name(const std::string& name);
// True when the schedule has UPDATE actions.
bool is_asynchronous(const Schedule& schedule);

// The unlowered run of `micro_batches` micro-batches on `ranks` ranks in the no-flush 1F1B order,
// with an UPDATE after every `update_every`-th BW of each stage (1: every BW; m: the last BW of
// every batch of m). The registered generators call it with micro_batches as the batch size.
Schedule async_run(const std::string& name, int ranks, int micro_batches, int update_every);
// The UPDATE interval of `name` for steps of `micro_batches`: 1, or micro_batches for pipedream-2bw.
int async_update_interval(const std::string& name, int micro_batches);

// The per-rank action lists of the trainer steps of an asynchronous schedule, lowered (a RECV right
// before the action that consumes it, a SEND right after the one that produces it: sends are
// buffered, so a message may cross a step boundary). Micro-batch indices: a step's m micro-batches
// are slots [0, m) in even windows and [m, 2m) in odd ones, so that the backwards of the previous
// window, which run in this one, keep their own slots and message keys.
struct AsyncWindows {
  std::string name;
  int ranks = 0;
  int micro_batches = 0;  // m: micro-batches per step (window)
  // [rank]: the first window after an empty pipeline (parity 0), the steady windows by their
  // parity, and the drain after a window of each parity.
  std::vector<std::vector<Action>> first;
  std::vector<std::vector<Action>> steady[2];
  std::vector<std::vector<Action>> drain[2];
  // [stage]: updates of the stage between F(k) and BW(k) in the steady state (p - s - 1 per
  // micro-batch methods, the number of batch updates for pipedream-2bw).
  std::vector<int> update_delay;
};

// Needs micro_batches >= ranks - 1 (a window covers the pipeline's depth); kInvalidArgument naming
// the schedule otherwise. `recompute`: a RECOMPUTE right before every BW (activation policy
// recompute).
AsyncWindows make_async_windows(const std::string& name, int ranks, int micro_batches, bool recompute = false);

// The steady state of an asynchronous schedule under `costs` (per stage, one stage per rank): the
// time per micro-batch once the pipeline is full, and what one run of m micro-batches adds to m of
// those (fill and drain), from two simulated runs (m and 2m micro-batches).
struct AsyncSteadyState {
  double per_micro_batch = 0.0;
  double fill_and_drain = 0.0;
  double run_makespan = 0.0;  // one run of m micro-batches
};
AsyncSteadyState simulate_async_steady_state(const std::string& name, int ranks, int micro_batches,
                                             const CostModel& costs);

}  // namespace pf::sched
