#include "runtime/schedules/overlapped_steps.h"

#include <string>

#include "runtime/core/error.h"

namespace pf::sched {

Schedule overlapped_run(const Schedule& schedule, int steps) {
  PF_CHECK_ARG(steps >= 1, "overlapped steps: steps must be >= 1, got ", steps);
  PF_CHECK_ARG(!schedule.traits.windowed(), "overlapped steps: '", schedule.name,
               "' never flushes, so its steps overlap already");
  const int m = schedule.num_micro_batches;
  check_schedule_size(schedule.num_ranks(), schedule.num_stages(), static_cast<int64_t>(steps) * m,
                      "overlapped steps (" + std::to_string(steps) + " steps)");
  Schedule run = schedule;
  run.num_micro_batches = steps * m;
  for (size_t r = 0; r < run.ranks.size(); ++r) {
    const std::vector<Action>& one = schedule.ranks[r];
    std::vector<Action>& list = run.ranks[r];
    list.clear();
    list.reserve(one.size() * static_cast<size_t>(steps));
    for (int t = 0; t < steps; ++t) {
      for (Action a : one) {
        PF_CHECK_ARG(a.kind != ActionKind::kAllReduce, "overlapped steps: '", schedule.name,
                     "' reduces gradients across replicas (ALLREDUCE), which ends every step on every rank together");
        if (a.kind == ActionKind::kStep) {
          a.kind = ActionKind::kUpdate;
          a.micro_batch = t * m + m - 1;
        } else if (a.micro_batch >= 0) {
          a.micro_batch += t * m;
        }
        list.push_back(a);
      }
    }
  }
  return run;
}

StepTimes simulate_step_times(const Schedule& schedule, const CostModel& costs, const SimulationOptions& options) {
  const SimulationResult one = simulate(schedule, costs, options);
  StepTimes t;
  t.barrier = one.makespan;
  t.span = one.max_span;
  t.overlapped = (simulate(overlapped_run(schedule, 4), costs, options).makespan -
                 simulate(overlapped_run(schedule, 2), costs, options).makespan) / 2;
  return t;
}

}  // namespace pf::sched
