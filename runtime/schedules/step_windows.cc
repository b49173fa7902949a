#include "runtime/schedules/step_windows.h"

#include <algorithm>

#include "runtime/core/error.h"

namespace pf::sched {
namespace {

// Position of F(k) in a rank's list, or the list size when it has none.
size_t forward_position(const std::vector<Action>& list, int k) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == ActionKind::kForward && list[i].micro_batch == k) return i;
  return list.size();
}

// Window slot of a run's micro-batch: `mb` in [m, 2m) is this window's (slot parity*m + mb - m),
// `mb` < m the previous window's (slot (1-parity)*m + mb).
int window_slot(int mb, int m, int parity) { return mb >= m ? parity * m + (mb - m) : (1 - parity) * m + mb; }

// Lowers one rank's window list: a RECV right before its consumer, a SEND right after its producer
// (every stage on its own rank); a RECOMPUTE before every BW with `recompute`; no backward
// messages at all in a local-learning schedule (every stage but the last trains on its HEAD).
std::vector<Action> lower_window(const std::vector<Action>& list, int num_stages, bool recompute, bool local) {
  std::vector<Action> out;
  for (const Action& a : list) {
    const int s = a.stage;
    if (a.kind == ActionKind::kForward) {
      if (s > 0) out.push_back(Action{ActionKind::kRecvF, s, a.micro_batch});
      out.push_back(a);
      if (s + 1 < num_stages) out.push_back(Action{ActionKind::kSendF, s, a.micro_batch});
    } else if (a.kind == ActionKind::kBackward) {
      if (recompute) out.push_back(Action{ActionKind::kRecompute, s, a.micro_batch});
      if (!local && s + 1 < num_stages) out.push_back(Action{ActionKind::kRecvB, s, a.micro_batch});
      out.push_back(a);
      if (!local && s > 0) out.push_back(Action{ActionKind::kSendB, s, a.micro_batch});
    } else {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace

Schedule start_run(const std::string& name, int ranks, int micro_batches, int update_every) {
  PF_CHECK_ARG(ranks >= 1 && micro_batches >= 1 && update_every >= 1, name, ": ranks, micro_batches and the update "
               "interval must be >= 1, got ", ranks, ", ", micro_batches, ", ", update_every);
  Schedule s;
  s.name = name;
  s.num_micro_batches = micro_batches;
  s.placement = Placement::one_per_rank(ranks);
  s.ranks.resize(static_cast<size_t>(ranks));
  return s;
}

void push_backward(std::vector<Action>& list, int rank, int k, int micro_batches, int update_every) {
  list.push_back(Action{ActionKind::kBackward, rank, k});
  if ((k + 1) % update_every == 0 || k == micro_batches - 1) list.push_back(Action{ActionKind::kUpdate, rank, k});
}

StepWindows cut_step_windows(const std::string& name, int ranks, int micro_batches,
                             const std::function<Schedule(int)>& run, const std::vector<int>& lag, bool recompute) {
  const int p = ranks, m = micro_batches;
  PF_INTERNAL_CHECK(static_cast<int>(lag.size()) == p, name, ": one lag per rank");
  for (int r = 0; r < p; ++r)
    PF_CHECK_ARG(lag[static_cast<size_t>(r)] <= m, name, ": micro_batches (", m, ") must be >= ", lag[static_cast<size_t>(r)],
                 ": a step's window must cover the pipeline's depth, so that only the previous window's "
                 "micro-batches are in flight when a step begins");
  check_schedule_size(p, p, 3 * static_cast<int64_t>(m), name + " (three windows)");
  const Schedule run1 = run(m);
  const Schedule run3 = run(3 * m);
  bool local = false;
  for (const auto& list : run1.ranks)
    for (const Action& a : list) local = local || a.kind == ActionKind::kHead;
  StepWindows w;
  w.name = name;
  w.ranks = p;
  w.micro_batches = m;
  w.first.resize(static_cast<size_t>(p));
  for (auto* lists : {&w.steady[0], &w.steady[1], &w.drain[0], &w.drain[1]}) lists->resize(static_cast<size_t>(p));
  w.update_delay.assign(static_cast<size_t>(p), 0);
  for (int r = 0; r < p; ++r) {
    const int d = lag[static_cast<size_t>(r)];
    const auto& l1 = run1.ranks[static_cast<size_t>(r)];
    const auto& l3 = run3.ranks[static_cast<size_t>(r)];
    const size_t cut1 = forward_position(l3, m - d), cut2 = forward_position(l3, 2 * m - d);
    // The first window is the run's prefix up to F(m - lag); the drain is the rest of the run of m.
    std::vector<Action> first(l3.begin(), l3.begin() + static_cast<ptrdiff_t>(cut1));
    PF_INTERNAL_CHECK(first.size() <= l1.size() && std::equal(first.begin(), first.end(), l1.begin()), name,
                      ": the run of ", m, " micro-batches does not start like the run of ", 3 * m);
    w.first[static_cast<size_t>(r)] = lower_window(first, p, recompute, local);
    const std::vector<Action> tail(l1.begin() + static_cast<ptrdiff_t>(first.size()), l1.end());
    for (int parity = 0; parity < 2; ++parity) {
      std::vector<Action> steady, drain = tail;
      for (size_t i = cut1; i < cut2; ++i) {
        Action a = l3[i];
        a.micro_batch = window_slot(a.micro_batch, m, parity);
        steady.push_back(a);
      }
      for (Action& a : drain) a.micro_batch += parity * m;  // the drained window's own slots
      w.steady[parity][static_cast<size_t>(r)] = lower_window(steady, p, recompute, local);
      w.drain[parity][static_cast<size_t>(r)] = lower_window(drain, p, recompute, local);
    }
  }
  return w;
}

SteadyState simulate_steady_state(const std::function<Schedule(int)>& run, int micro_batches, const CostModel& costs) {
  const int m = micro_batches;
  const double t1 = simulate(run(m), costs).makespan;
  const double t2 = simulate(run(2 * m), costs).makespan;
  SteadyState r;
  r.per_micro_batch = (t2 - t1) / m;
  r.fill_and_drain = t1 - m * r.per_micro_batch;
  r.run_makespan = t1;
  return r;
}

}  // namespace pf::sched
