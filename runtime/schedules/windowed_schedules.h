// A generated windowed schedule (ScheduleTraits::windowed: asynchronous or local learning) as the
// trainer and the simulator use it, whichever family it is: the family's functions are chosen here
// from the schedule's traits (async_schedules.h, local_schedules.h).
#pragma once

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/step_windows.h"

namespace pf::sched {

// `steps` steps of the schedule's num_micro_batches in a row: one fill, the steady state, one drain
// (the same update interval as the schedule). kInvalidArgument for a synchronous schedule.
Schedule windowed_run(const Schedule& schedule, int steps);

// The trainer's step windows for steps of the schedule's num_micro_batches. `recompute`: a RECOMPUTE
// right before every BW (asynchronous schedules that stash weights only; the caller checks).
StepWindows windowed_step_windows(const Schedule& schedule, bool recompute);

// The steady state of the schedule under `costs`.
SteadyState windowed_steady_state(const Schedule& schedule, const CostModel& costs);

}  // namespace pf::sched
