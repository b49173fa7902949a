#include "runtime/schedules/local_schedules.h"

#include <algorithm>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {

namespace {

// The family's members: ppll updates after every micro-batch, local-updates once per step.
struct LocalMember {
  const char* name;
  UpdateInterval update_interval;
};
const LocalMember kMembers[] = {{"ppll", UpdateInterval::kMicroBatch}, {"local-updates", UpdateInterval::kStep}};

ScheduleTraits local_traits(const LocalMember& member) {
  ScheduleTraits t;
  t.family = ScheduleFamily::kLocalLearning;
  t.update_interval = member.update_interval;
  t.weights = WeightVersioning::kLocal;
  t.checkpoint_refusal = "its auxiliary heads are not saved";
  return t;
}

}  // namespace

bool has_local_heads(const Schedule& schedule) {
  for (const auto& list : schedule.ranks)
    for (const Action& a : list)
      if (a.kind == ActionKind::kHead) return true;
  return false;
}

Schedule local_run(const std::string& name, int ranks, int micro_batches, int update_every) {
  Schedule s = start_run(name, ranks, micro_batches, update_every);
  for (int r = 0; r < ranks; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    for (int k = 0; k < micro_batches; ++k) {
      list.push_back(Action{ActionKind::kForward, r, k});
      if (r + 1 < ranks) list.push_back(Action{ActionKind::kHead, r, k});
      push_backward(list, r, k, micro_batches, update_every);
    }
  }
  return s;
}

namespace {

void register_local_generators() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const LocalMember& member : kMembers) {
      const std::string name = member.name;
      if (has_generator(name)) continue;
      const ScheduleTraits traits = local_traits(member);
      register_generator(
          name,
          [name, traits](const GeneratorOptions& o) {
            PF_CHECK_ARG(o.chunks == 1, name, " places one stage per rank: chunks must be 1, got ", o.chunks);
            PF_CHECK_ARG(!o.reverse_backward, "reverse_backward applies to bfs only, not to ", name);
            return local_run(name, o.ranks, o.micro_batches, traits.update_every(o.micro_batches));
          },
          traits);
    }
  });
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
const bool kLocalRegistered = (register_local_generators(), true);

}  // namespace

StepWindows make_local_windows(const std::string& name, int ranks, int micro_batches) {
  const ScheduleTraits traits = schedule_traits(name);
  PF_CHECK_ARG(traits.local_learning(), "'", name, "' is not a local-learning schedule");
  const int p = ranks, m = micro_batches;
  PF_CHECK_ARG(m >= p - 1, name, ": micro_batches (", m, ") must be >= ranks - 1 (", p - 1,
               "): rank s works one step behind on the micro-batches rank s-1 forwarded");
  std::vector<int> lag(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) lag[static_cast<size_t>(r)] = r;
  const int every = traits.update_every(m);
  return cut_step_windows(name, p, m, [&](int n) { return local_run(name, p, n, every); }, lag, false);
}

SteadyState simulate_local_steady_state(const std::string& name, int ranks, int micro_batches, const CostModel& costs) {
  const ScheduleTraits traits = schedule_traits(name);
  PF_CHECK_ARG(traits.local_learning(), "'", name, "' is not a local-learning schedule");
  const int every = traits.update_every(micro_batches);
  return simulate_steady_state([&](int n) { return local_run(name, ranks, n, every); }, micro_batches, costs);
}

}  // namespace pf::sched
