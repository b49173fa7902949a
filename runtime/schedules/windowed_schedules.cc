#include "runtime/schedules/windowed_schedules.h"

#include "runtime/core/error.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/schedules/local_schedules.h"

namespace pf::sched {
namespace {

void require_windowed(const Schedule& s) {
  PF_CHECK_ARG(s.traits.windowed(), "schedule '", s.name,
               "' is synchronous: it flushes every step (windows are for asynchronous and local-learning schedules)");
}

}  // namespace

Schedule windowed_run(const Schedule& s, int steps) {
  require_windowed(s);
  PF_CHECK_ARG(steps >= 1, "windowed_run: steps must be >= 1, got ", steps);
  const int m = s.num_micro_batches, every = s.traits.update_every(m);
  check_schedule_size(s.num_ranks(), s.num_stages(), static_cast<int64_t>(steps) * m, "windowed_run");
  Schedule run = s.traits.local_learning() ? local_run(s.name, s.num_ranks(), steps * m, every)
                                          : async_run(s.name, s.num_ranks(), steps * m, every);
  run.traits = s.traits;
  return run;
}

StepWindows windowed_step_windows(const Schedule& s, bool recompute) {
  require_windowed(s);
  if (s.traits.local_learning()) return make_local_windows(s.name, s.num_ranks(), s.num_micro_batches);
  return make_async_windows(s.name, s.num_ranks(), s.num_micro_batches, recompute);
}

SteadyState windowed_steady_state(const Schedule& s, const CostModel& costs) {
  require_windowed(s);
  return s.traits.local_learning() ? simulate_local_steady_state(s.name, s.num_ranks(), s.num_micro_batches, costs)
                                   : simulate_async_steady_state(s.name, s.num_ranks(), s.num_micro_batches, costs);
}

}  // namespace pf::sched
