// Policy balance (BPipe): heavy ranks lend activation memory from light partner ranks. See
// activation_policy.h (balance_activations) and docs/MEMORY.md.
#include <algorithm>
#include <numeric>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/activation_candidates.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

using detail::Candidate;
using detail::ContextKey;
using detail::Insertion;

// The costs to simulate with: the caller's when they give per-stage times, else unit times with the
// caller's memory figures.
CostModel timing_costs(const Schedule& schedule, const CostModel& costs) {
  if (costs.num_stages() == schedule.num_stages()) return costs;
  CostModel c = CostModel::uniform(schedule.num_stages());
  c.m_b = costs.m_b;
  c.m_w = costs.m_w;
  c.m_in = costs.m_in;
  c.transfer_bandwidth = costs.transfer_bandwidth;
  return c;
}

// A context that can move from the owner to the partner, with where HOLD and RETURN go in the
// partner's (original) list.
struct Move {
  Candidate c;
  int hold_slot = 0;
  int return_slot = 0;
};

// Plans the moves of one (owner, partner) pair.
class PairPlanner {
 public:
  PairPlanner(const std::vector<Action>& owner, const std::vector<TimedAction>& owner_times,
              const std::vector<Action>& partner, const std::vector<TimedAction>& partner_times,
              const CostModel& costs)
      : owner_(owner), partner_(partner), costs_(costs) {
    // boundary[j]: when the partner is done with its actions before index j (prefix max of ends).
    std::vector<double> boundary(partner.size() + 1, 0.0);
    for (size_t j = 0; j < partner.size(); ++j) boundary[j + 1] = std::max(boundary[j], partner_times[j].end);
    for (const Candidate& c : detail::candidates_of(owner)) {
      const double copy = costs.transfer_bandwidth > 0 ? costs.mem_b(c.key.first) / costs.transfer_bandwidth : 0.0;
      const TimedAction& f = owner_times[static_cast<size_t>(c.f)];
      const double landed = f.end + copy;
      const double needed = owner_times[static_cast<size_t>(c.reload_slot)].start - copy;
      Move m;
      m.c = c;
      // HOLD at the first boundary at or after the landing (the partner never waits for it), and
      // after every partner action that ends by the start of F (whatever F depends on).
      m.hold_slot = static_cast<int>(std::lower_bound(boundary.begin(), boundary.end(), landed) - boundary.begin());
      for (size_t k = 0; k < partner.size(); ++k)
        if (partner_times[k].end <= f.start) m.hold_slot = std::max(m.hold_slot, static_cast<int>(k) + 1);
      // RETURN at the last boundary strictly before the owner needs the context back: nothing
      // before it can depend on the owner's actions from the RELOAD on (those end at or after
      // `needed`), so the RELOAD's wait cannot close a cycle.
      m.return_slot = static_cast<int>(std::lower_bound(boundary.begin(), boundary.end(), needed) - boundary.begin()) - 1;
      if (m.return_slot > m.hold_slot) movable_.push_back(m);
    }
  }

  bool empty() const { return movable_.empty(); }

  // Chooses moves so that both ranks stay <= target: sweep the owner's list; at the first point
  // above target, move the live context needed furthest in the future whose HOLD/RETURN window
  // covers that point and that the partner can take. False when no such context is left.
  bool plan(double target, std::vector<Move>* out) const {
    const double limit = target * (1.0 + 1e-12);
    std::vector<char> moved(movable_.size(), 0);
    while (true) {
      const int at = first_excess(moved, limit);
      if (at < 0) break;
      std::vector<size_t> order;
      for (size_t k = 0; k < movable_.size(); ++k) {
        const Candidate& c = movable_[k].c;
        if (!moved[k] && c.f < at && at < c.reload_slot) order.push_back(k);
      }
      std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const Candidate &x = movable_[a].c, &y = movable_[b].c;
        return x.reload_slot != y.reload_slot ? x.reload_slot > y.reload_slot : x.f < y.f;
      });
      bool taken = false;
      for (size_t k : order) {
        moved[k] = 1;
        if (detail::rank_peak(partner_list(moved), costs_) <= limit) {
          taken = true;
          break;
        }
        moved[k] = 0;
      }
      if (!taken) return false;
    }
    out->clear();
    for (size_t k = 0; k < movable_.size(); ++k)
      if (moved[k]) out->push_back(movable_[k]);
    return true;
  }

  std::vector<Action> owner_list(const std::vector<Move>& moves) const {
    std::vector<Candidate> chosen;
    for (const Move& m : moves) chosen.push_back(m.c);
    return detail::rewrite(owner_, chosen, false);
  }

  std::vector<Action> partner_list(const std::vector<Move>& moves) const {
    std::vector<Insertion> returns, holds;
    for (const Move& m : moves) {
      const int s = m.c.key.first, mb = m.c.key.second;
      holds.push_back({m.hold_slot, Action{ActionKind::kHold, s, mb}});
      returns.push_back({m.return_slot, Action{ActionKind::kReturn, s, mb}});
    }
    returns.insert(returns.end(), holds.begin(), holds.end());  // at one slot: RETURN before HOLD
    return detail::insert_actions(partner_, std::move(returns));
  }

 private:
  std::vector<Action> partner_list(const std::vector<char>& moved) const {
    std::vector<Move> moves;
    for (size_t k = 0; k < movable_.size(); ++k)
      if (moved[k]) moves.push_back(movable_[k]);
    return partner_list(moves);
  }

  // The first original index of the owner's list where its resident bytes exceed `limit` (after a
  // RELOAD placed before it, or after the action itself), or -1.
  int first_excess(const std::vector<char>& moved, double limit) const {
    const size_t n = owner_.size();
    std::vector<double> reload_at(n + 1, 0.0), offload_after(n, 0.0);
    for (size_t k = 0; k < movable_.size(); ++k) {
      if (!moved[k]) continue;
      const Candidate& c = movable_[k].c;
      const double bytes = costs_.mem_b(c.key.first);
      reload_at[static_cast<size_t>(c.reload_slot)] += bytes;
      offload_after[static_cast<size_t>(c.f)] += bytes;
    }
    double bytes = 0.0;
    for (size_t i = 0; i < n; ++i) {
      bytes += reload_at[i];
      if (bytes > limit) return static_cast<int>(i);
      bytes += activation_delta(owner_[i], costs_, false).bytes;
      if (bytes > limit) return static_cast<int>(i);
      bytes -= offload_after[i];
    }
    return -1;
  }

  const std::vector<Action>& owner_;
  const std::vector<Action>& partner_;
  const CostModel& costs_;
  std::vector<Move> movable_;
};

// The boundaries come from the simulator, whose sends never block; the executor's transports may
// rendezvous (as the validator assumes), which can turn a RETURN placed after a partner's SEND, or a
// HOLD placed before one, into a cycle. Run the lists under the validator's blocking rules and, while
// the owner stops at a RELOAD or the partner at a HOLD of a moved context, return that context one
// action earlier or take it one action later (dropping the move when its window closes). Both only
// shorten what the partner holds, so no peak rises. Commits the pair to *out when it runs through;
// leaves *out unchanged when a rank stops anywhere else.
void make_deadlock_free(int owner, int partner, const PairPlanner& planner, std::vector<Move>* moves,
                        Schedule* out) {
  while (!moves->empty()) {
    Schedule trial = *out;
    trial.ranks[owner] = planner.owner_list(*moves);
    trial.ranks[partner] = planner.partner_list(*moves);
    const ActionIndex index(trial);
    const std::vector<int> stop = progress_until_blocked(trial, index);
    bool stuck = false, adjusted = false;
    for (int r = 0; r < trial.num_ranks() && !adjusted; ++r) {
      if (stop[r] >= static_cast<int>(trial.ranks[r].size())) continue;
      stuck = true;
      const Action& a = trial.ranks[r][static_cast<size_t>(stop[r])];
      const bool reload = r == owner && a.kind == ActionKind::kReload;
      const bool hold = r == partner && a.kind == ActionKind::kHold;
      if (!reload && !hold) continue;
      for (size_t k = 0; k < moves->size(); ++k) {
        Move& m = (*moves)[k];
        if (m.c.key != ContextKey{a.stage, a.micro_batch}) continue;
        if (reload) m.return_slot -= 1;
        else m.hold_slot += 1;
        if (m.return_slot <= m.hold_slot) moves->erase(moves->begin() + static_cast<long>(k));
        adjusted = true;
        break;
      }
    }
    if (!stuck) {
      *out = std::move(trial);
      return;
    }
    if (!adjusted) return;
  }
}

}  // namespace

Schedule balance_activations(const Schedule& schedule, const CostModel& costs) {
  Schedule out = schedule;
  const int P = schedule.num_ranks();
  if (P < 2) return out;
  const CostModel timed = timing_costs(schedule, costs);
  const SimulationResult sim = simulate(schedule, timed);
  const std::vector<double> peaks = activation_peak_bytes(schedule, costs);
  std::vector<int> order(static_cast<size_t>(P));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return peaks[a] > peaks[b]; });
  for (int i = 0; i < P / 2; ++i) {
    const int owner = order[static_cast<size_t>(i)], partner = order[static_cast<size_t>(P - 1 - i)];
    double lo = peaks[partner], hi = peaks[owner];
    if (!(hi > lo)) continue;
    PairPlanner planner(schedule.ranks[owner], sim.timeline.ranks[owner], schedule.ranks[partner],
                        sim.timeline.ranks[partner], costs);
    if (planner.empty()) continue;
    std::vector<Move> best, moves;
    bool found = false;
    if (planner.plan(lo, &moves)) {
      best = moves;
      found = true;
    } else {
      for (int iter = 0; iter < 60 && hi - lo > 1e-9 * std::max(1.0, hi); ++iter) {
        const double mid = 0.5 * (lo + hi);
        if (planner.plan(mid, &moves)) {
          hi = mid;
          best = moves;
          found = true;
        } else {
          lo = mid;
        }
      }
    }
    if (!found || best.empty()) continue;
    make_deadlock_free(owner, partner, planner, &best, &out);
  }
  return out;
}

}  // namespace pf::sched
