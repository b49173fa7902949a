// Consecutive steps of a synchronous schedule that overlap (TrainingConfig::overlap_steps): each
// rank begins step t + 1 as soon as its own part of step t and its update are done, instead of
// waiting for every rank at a barrier. What the simulator and the planner predict for it.
#pragma once

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// `steps` copies of `schedule` back to back on every rank, as the trainer runs them with
// overlap_steps: micro-batch (unit) k of copy t is numbered t * m + k, and every STEP(s) becomes
// UPDATE(s, t * m + m - 1), which costs t_step as STEP does and waits only for its own rank (a
// stage's gradients all come from its rank). kInvalidArgument for a windowed schedule (its steps
// overlap already), for one with ALLREDUCE (data parallelism ends each step on every rank
// together) or past the schedule size limits.
Schedule overlapped_run(const Schedule& schedule, int steps);

// Time per step under `costs`, with and without overlap.
struct StepTimes {
  double barrier = 0.0;     // one step's makespan: every step ends on every rank together
  double overlapped = 0.0;  // steady state with overlap: (makespan(4 steps) - makespan(2 steps)) / 2
  double span = 0.0;        // one step's longest rank span (the zero-bubble paper's measure)
};
StepTimes simulate_step_times(const Schedule& schedule, const CostModel& costs, const SimulationOptions& options = {});

}  // namespace pf::sched
