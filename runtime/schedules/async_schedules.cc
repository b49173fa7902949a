#include "runtime/schedules/async_schedules.h"

#include <algorithm>
#include <mutex>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"

namespace pf::sched {

const std::vector<std::string>& async_schedule_names() {
  static const std::vector<std::string> names = {"pipedream", "pipedream-2bw", "spectrain", "pipemare"};
  return names;
}

bool is_async_schedule_name(const std::string& name) {
  const auto& n = async_schedule_names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

bool is_asynchronous(const Schedule& schedule) {
  for (const auto& list : schedule.ranks)
    for (const Action& a : list)
      if (a.kind == ActionKind::kUpdate) return true;
  return false;
}

Schedule async_run(const std::string& name, int ranks, int micro_batches, int update_every) {
  PF_CHECK_ARG(ranks >= 1 && micro_batches >= 1 && update_every >= 1, name, ": ranks, micro_batches and the update "
               "interval must be >= 1, got ", ranks, ", ", micro_batches, ", ", update_every);
  const int p = ranks, m = micro_batches;
  Schedule s;
  s.name = name;
  s.num_micro_batches = m;
  s.placement = Placement::one_per_rank(p);
  s.ranks.resize(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warmup = std::min(p - r - 1, m);
    auto backward = [&](int k) {
      list.push_back(Action{ActionKind::kBackward, r, k});
      if ((k + 1) % update_every == 0 || k == m - 1) list.push_back(Action{ActionKind::kUpdate, r, k});
    };
    for (int k = 0; k < warmup; ++k) list.push_back(Action{ActionKind::kForward, r, k});
    for (int k = warmup; k < m; ++k) {
      list.push_back(Action{ActionKind::kForward, r, k});
      backward(k - warmup);
    }
    for (int k = m - warmup; k < m; ++k) backward(k);
  }
  return s;
}

int async_update_interval(const std::string& name, int micro_batches) {
  return name == "pipedream-2bw" ? micro_batches : 1;  // 2BW: once per batch (a step)
}

namespace {

void require_one_chunk(const std::string& name, const GeneratorOptions& o) {
  PF_CHECK_ARG(o.chunks == 1, name, " places one stage per rank: chunks must be 1, got ", o.chunks);
  PF_CHECK_ARG(!o.reverse_backward, "reverse_backward applies to bfs only, not to ", name);
}

void register_async_generators() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const std::string& name : async_schedule_names()) {
      if (has_generator(name)) continue;
      register_generator(name, [name](const GeneratorOptions& o) {
        require_one_chunk(name, o);
        return async_run(name, o.ranks, o.micro_batches, async_update_interval(name, o.micro_batches));
      });
    }
  });
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
const bool kAsyncRegistered = (register_async_generators(), true);

// Position of F(k) in a rank's list, or the list size when it has none.
size_t forward_position(const std::vector<Action>& list, int k) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == ActionKind::kForward && list[i].micro_batch == k) return i;
  return list.size();
}

// Window slot of a run's micro-batch: `mb` in [m, 2m) is this window's (slot parity*m + mb - m),
// `mb` < m the previous window's (slot (1-parity)*m + mb).
int window_slot(int mb, int m, int parity) { return mb >= m ? parity * m + (mb - m) : (1 - parity) * m + mb; }

// Lowers one rank's window list with a RECV right before its consumer and a SEND right after its
// producer (every stage is on its own rank); `recompute` puts a RECOMPUTE before every BW.
std::vector<Action> lower_window(const std::vector<Action>& list, int num_stages, bool recompute) {
  std::vector<Action> out;
  for (const Action& a : list) {
    if (recompute && a.kind == ActionKind::kBackward) out.push_back(Action{ActionKind::kRecompute, a.stage, a.micro_batch});
    const int s = a.stage;
    if (a.kind == ActionKind::kForward) {
      if (s > 0) out.push_back(Action{ActionKind::kRecvF, s, a.micro_batch});
      out.push_back(a);
      if (s + 1 < num_stages) out.push_back(Action{ActionKind::kSendF, s, a.micro_batch});
    } else if (a.kind == ActionKind::kBackward) {
      if (s + 1 < num_stages) out.push_back(Action{ActionKind::kRecvB, s, a.micro_batch});
      out.push_back(a);
      if (s > 0) out.push_back(Action{ActionKind::kSendB, s, a.micro_batch});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

AsyncWindows make_async_windows(const std::string& name, int ranks, int micro_batches, bool recompute) {
  PF_CHECK_ARG(is_async_schedule_name(name), "'", name, "' is not an asynchronous schedule");
  const int p = ranks, m = micro_batches;
  PF_CHECK_ARG(m >= p - 1, name, ": micro_batches (", m, ") must be >= ranks - 1 (", p - 1,
               "): a step's window must cover the pipeline's depth, so that only the previous window's "
               "micro-batches are in flight when a step begins");
  check_schedule_size(p, p, 3 * static_cast<int64_t>(m), name + " (three windows)");
  const int every = async_update_interval(name, m);
  const Schedule run1 = async_run(name, p, m, every);
  const Schedule run3 = async_run(name, p, 3 * m, every);
  AsyncWindows w;
  w.name = name;
  w.ranks = p;
  w.micro_batches = m;
  w.first.resize(static_cast<size_t>(p));
  for (auto* lists : {&w.steady[0], &w.steady[1], &w.drain[0], &w.drain[1]}) lists->resize(static_cast<size_t>(p));
  w.update_delay.assign(static_cast<size_t>(p), 0);
  for (int r = 0; r < p; ++r) {
    const auto& l1 = run1.ranks[static_cast<size_t>(r)];
    const auto& l3 = run3.ranks[static_cast<size_t>(r)];
    const size_t cut1 = forward_position(l3, m), cut2 = forward_position(l3, 2 * m);
    // The first window is the run's prefix up to F(m); the drain is the rest of the run of m.
    std::vector<Action> first(l3.begin(), l3.begin() + static_cast<ptrdiff_t>(cut1));
    PF_INTERNAL_CHECK(std::equal(first.begin(), first.end(), l1.begin()) && first.size() <= l1.size(), name,
                      ": the run of ", m, " micro-batches does not start like the run of ", 3 * m);
    w.first[static_cast<size_t>(r)] = lower_window(first, p, recompute);
    std::vector<Action> tail(l1.begin() + static_cast<ptrdiff_t>(first.size()), l1.end());
    for (int parity = 0; parity < 2; ++parity) {
      std::vector<Action> steady, drain = tail;
      for (size_t i = cut1; i < cut2; ++i) {
        Action a = l3[i];
        a.micro_batch = window_slot(a.micro_batch, m, parity);
        steady.push_back(a);
      }
      for (Action& a : drain) a.micro_batch += parity * m;  // the drained window's own slots
      w.steady[parity][static_cast<size_t>(r)] = lower_window(steady, p, recompute);
      w.drain[parity][static_cast<size_t>(r)] = lower_window(drain, p, recompute);
    }
    // Updates between F(m) and BW(m) on this rank: the steady-state delay of its gradients.
    int updates = 0;
    bool open = false;
    for (size_t i = 0; i < l3.size(); ++i) {
      const Action& a = l3[i];
      if (a.micro_batch == m && a.kind == ActionKind::kForward) open = true;
      if (a.micro_batch == m && a.kind == ActionKind::kBackward) break;
      if (open && a.kind == ActionKind::kUpdate) ++updates;
    }
    w.update_delay[static_cast<size_t>(r)] = updates;
  }
  return w;
}

AsyncSteadyState simulate_async_steady_state(const std::string& name, int ranks, int micro_batches,
                                             const CostModel& costs) {
  PF_CHECK_ARG(is_async_schedule_name(name), "'", name, "' is not an asynchronous schedule");
  const int m = micro_batches;
  const int every = async_update_interval(name, m);
  const double t1 = simulate(async_run(name, ranks, m, every), costs).makespan;
  const double t2 = simulate(async_run(name, ranks, 2 * m, every), costs).makespan;
  AsyncSteadyState r;
  r.per_micro_batch = (t2 - t1) / m;
  r.fill_and_drain = t1 - m * r.per_micro_batch;
  r.run_makespan = t1;
  return r;
}

}  // namespace pf::sched
