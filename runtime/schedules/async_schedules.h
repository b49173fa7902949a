// Asynchronous schedules (docs/SCHEDULES.md, "Asynchronous schedules"): PipeDream (weight stashing),
// PipeDream-2BW, SpecTrain and PipeMare all run the 1F1B order without a flush: rank s does
// d_s = min(p-s-1, m) warm-up forwards, then alternates F(k), BW(k - d_s), and updates its stage
// with UPDATE actions instead of one STEP: after every BW (pipedream, spectrain, pipemare) or after
// the last BW of every batch of m micro-batches (pipedream-2bw). Which weights each F and BW uses is
// the executor's business (runtime/execution/weight_versions.h); the order is the same for all four.
//
// As an IR schedule, a generator's output is one *run* of m micro-batches: it fills, runs the steady
// state and drains. A trainer step is a *window* of the steady state (step_windows.h).
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/step_windows.h"

namespace pf::sched {

// The generators "pipedream", "pipedream-2bw", "spectrain" and "pipemare" register with their traits
// (family asynchronous; ScheduleTraits tells them apart: update interval, weight versioning, whether
// they stash weights, whether they can be checkpointed).
// True when the schedule has UPDATE actions.
bool is_asynchronous(const Schedule& schedule);

// The unlowered run of `micro_batches` micro-batches on `ranks` ranks in the no-flush 1F1B order,
// with an UPDATE after every `update_every`-th BW of each stage (1: every BW; m: the last BW of
// every batch of m). The registered generators call it with micro_batches as the batch size.
Schedule async_run(const std::string& name, int ranks, int micro_batches, int update_every);

// Needs micro_batches >= ranks - 1 (a window covers the pipeline's depth); kInvalidArgument naming
// the schedule otherwise. `recompute`: a RECOMPUTE right before every BW (activation policy
// recompute).
StepWindows make_async_windows(const std::string& name, int ranks, int micro_batches, bool recompute = false);

// The steady state (step_windows.h) of an asynchronous schedule under `costs`.
SteadyState simulate_async_steady_state(const std::string& name, int ranks, int micro_batches, const CostModel& costs);

}  // namespace pf::sched
