#include "runtime/schedules/async_schedules.h"

#include <algorithm>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"

namespace pf::sched {

namespace {

// The family's members and what tells them apart.
struct AsyncMember {
  const char* name;
  UpdateInterval update_interval;
  WeightVersioning weights;
  bool stashes_weights;
  const char* checkpoint_refusal;
};
const AsyncMember kMembers[] = {
    {"pipedream", UpdateInterval::kMicroBatch, WeightVersioning::kPipeDream, true, ""},
    {"pipedream-2bw", UpdateInterval::kStep, WeightVersioning::kPipeDream2BW, true, ""},
    {"spectrain", UpdateInterval::kMicroBatch, WeightVersioning::kSpecTrain, false, ""},
    {"pipemare", UpdateInterval::kMicroBatch, WeightVersioning::kPipeMare, false,
     "its discrepancy average is not saved"},
};

ScheduleTraits async_traits(const AsyncMember& member) {
  ScheduleTraits t;
  t.family = ScheduleFamily::kAsynchronous;
  t.update_interval = member.update_interval;
  t.weights = member.weights;
  t.stashes_weights = member.stashes_weights;
  t.checkpoint_refusal = member.checkpoint_refusal;
  return t;
}

}  // namespace

bool is_asynchronous(const Schedule& schedule) {
  for (const auto& list : schedule.ranks)
    for (const Action& a : list)
      if (a.kind == ActionKind::kUpdate) return true;
  return false;
}

Schedule async_run(const std::string& name, int ranks, int micro_batches, int update_every) {
  const int p = ranks, m = micro_batches;
  Schedule s = start_run(name, p, m, update_every);
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warmup = std::min(p - r - 1, m);
    auto backward = [&](int k) { push_backward(list, r, k, m, update_every); };
    for (int k = 0; k < warmup; ++k) list.push_back(Action{ActionKind::kForward, r, k});
    for (int k = warmup; k < m; ++k) {
      list.push_back(Action{ActionKind::kForward, r, k});
      backward(k - warmup);
    }
    for (int k = m - warmup; k < m; ++k) backward(k);
  }
  return s;
}

namespace {

void require_one_chunk(const std::string& name, const GeneratorOptions& o) {
  PF_CHECK_ARG(o.chunks == 1, name, " places one stage per rank: chunks must be 1, got ", o.chunks);
  PF_CHECK_ARG(!o.reverse_backward, "reverse_backward applies to bfs only, not to ", name);
}

void register_async_generators() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const AsyncMember& member : kMembers) {
      const std::string name = member.name;
      if (has_generator(name)) continue;
      const ScheduleTraits traits = async_traits(member);
      register_generator(
          name,
          [name, traits](const GeneratorOptions& o) {
            require_one_chunk(name, o);
            return async_run(name, o.ranks, o.micro_batches, traits.update_every(o.micro_batches));
          },
          traits);
    }
  });
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
const bool kAsyncRegistered = (register_async_generators(), true);

}  // namespace

StepWindows make_async_windows(const std::string& name, int ranks, int micro_batches, bool recompute) {
  const ScheduleTraits traits = schedule_traits(name);
  PF_CHECK_ARG(traits.asynchronous(), "'", name, "' is not an asynchronous schedule");
  const int p = ranks, m = micro_batches;
  PF_CHECK_ARG(m >= p - 1, name, ": micro_batches (", m, ") must be >= ranks - 1 (", p - 1,
               "): a step's window must cover the pipeline's depth, so that only the previous window's "
               "micro-batches are in flight when a step begins");
  const int every = traits.update_every(m);
  auto run = [&](int n) { return async_run(name, p, n, every); };
  StepWindows w = cut_step_windows(name, p, m, run, std::vector<int>(static_cast<size_t>(p), 0), recompute);
  // Updates between F(m) and BW(m) on each rank: the steady-state delay of its gradients.
  const Schedule run3 = run(3 * m);
  for (int r = 0; r < p; ++r) {
    int updates = 0;
    bool open = false;
    for (const Action& a : run3.ranks[static_cast<size_t>(r)]) {
      if (a.micro_batch == m && a.kind == ActionKind::kForward) open = true;
      if (a.micro_batch == m && a.kind == ActionKind::kBackward) break;
      if (open && a.kind == ActionKind::kUpdate) ++updates;
    }
    w.update_delay[static_cast<size_t>(r)] = updates;
  }
  return w;
}

SteadyState simulate_async_steady_state(const std::string& name, int ranks, int micro_batches, const CostModel& costs) {
  const ScheduleTraits traits = schedule_traits(name);
  PF_CHECK_ARG(traits.asynchronous(), "'", name, "' is not an asynchronous schedule");
  const int every = traits.update_every(micro_batches);
  return simulate_steady_state([&](int n) { return async_run(name, ranks, n, every); }, micro_batches, costs);
}

}  // namespace pf::sched
