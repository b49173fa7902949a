#include "runtime/schedules/activation_policy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/activation_candidates.h"

namespace pf::sched {
namespace detail {

namespace {
bool is_backward(ActionKind k) { return k == ActionKind::kBackwardInput || k == ActionKind::kBackward; }
bool is_work(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight ||
         k == ActionKind::kBackward;
}
}  // namespace

std::vector<Candidate> candidates_of(const std::vector<Action>& list) {
  std::map<ContextKey, int> f_at;
  std::vector<Candidate> out;
  for (int i = 0; i < static_cast<int>(list.size()); ++i) {
    const Action& a = list[i];
    const ContextKey k{a.stage, a.micro_batch};
    if (a.kind == ActionKind::kForward) f_at[k] = i;
    if (!is_backward(a.kind)) continue;
    auto it = f_at.find(k);
    if (it == f_at.end()) continue;
    const int f = it->second;
    int last_b = -1, last_work = -1;
    for (int x = f + 1; x < i; ++x) {
      if (is_backward(list[x].kind)) last_b = x;
      if (is_work(list[x].kind)) last_work = x;
    }
    if (last_work < 0) continue;  // nothing between F and B
    Candidate c;
    c.key = k;
    c.f = f;
    c.b = i;
    c.reload_slot = last_b >= 0 ? last_b + 1 : last_work;
    out.push_back(c);
  }
  return out;
}

std::vector<Action> insert_actions(const std::vector<Action>& list, std::vector<Insertion> insertions) {
  std::stable_sort(insertions.begin(), insertions.end(),
                   [](const Insertion& a, const Insertion& b) { return a.slot < b.slot; });
  std::vector<Action> out;
  out.reserve(list.size() + insertions.size());
  size_t next = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    while (next < insertions.size() && insertions[next].slot == static_cast<int>(i)) out.push_back(insertions[next++].action);
    if (i < list.size()) out.push_back(list[i]);
  }
  return out;
}

std::vector<Action> rewrite(const std::vector<Action>& list, const std::vector<Candidate>& chosen, bool recompute) {
  // OFFLOADs of a slot come before its RELOADs (both before the action at the slot).
  std::vector<Insertion> offloads, reloads;
  for (const Candidate& c : chosen) {
    const int s = c.key.first, mb = c.key.second;
    if (recompute) {
      reloads.push_back({c.b, Action{ActionKind::kRecompute, s, mb}});
    } else {
      offloads.push_back({c.f + 1, Action{ActionKind::kOffload, s, mb}});
      reloads.push_back({c.reload_slot, Action{ActionKind::kReload, s, mb}});
    }
  }
  offloads.insert(offloads.end(), reloads.begin(), reloads.end());
  return insert_actions(list, std::move(offloads));
}

double rank_peak(const std::vector<Action>& list, const CostModel& costs) {
  std::set<ContextKey> recomputed;
  for (const Action& a : list)
    if (a.kind == ActionKind::kRecompute) recomputed.insert({a.stage, a.micro_batch});
  double bytes = 0.0, peak = 0.0;
  for (const Action& a : list) {
    bytes += activation_delta(a, costs, recomputed.count({a.stage, a.micro_batch}) > 0).bytes;
    peak = std::max(peak, bytes);
  }
  return peak;
}

}  // namespace detail

namespace {

using detail::Candidate;
using detail::candidates_of;
using detail::rank_peak;
using detail::rewrite;

void check_plain(const Schedule& schedule) {
  for (int r = 0; r < schedule.num_ranks(); ++r)
    for (const Action& a : schedule.ranks[r])
      PF_CHECK_ARG(a.kind != ActionKind::kOffload && a.kind != ActionKind::kReload && a.kind != ActionKind::kRecompute &&
                       a.kind != ActionKind::kHold && a.kind != ActionKind::kReturn,
                   "activation policy: schedule '", schedule.name, "' already has ", action_to_string(a),
                   " on rank ", r, "; apply a policy to a schedule without OFFLOAD/RELOAD/RECOMPUTE/HOLD/RETURN");
}

}  // namespace

const char* activation_policy_name(ActivationPolicy policy) {
  switch (policy) {
    case ActivationPolicy::kNone: return "none";
    case ActivationPolicy::kRecompute: return "recompute";
    case ActivationPolicy::kOffloadHost: return "offload-host";
    case ActivationPolicy::kOffloadFile: return "offload-file";
    case ActivationPolicy::kSelective: return "selective";
    case ActivationPolicy::kBalance: return "balance";
  }
  return "?";
}

std::vector<std::string> activation_policy_names() {
  return {"none", "recompute", "offload-host", "offload-file", "selective", "balance"};
}

ActivationPolicy parse_activation_policy(const std::string& name) {
  for (ActivationPolicy p : {ActivationPolicy::kNone, ActivationPolicy::kRecompute, ActivationPolicy::kOffloadHost,
                             ActivationPolicy::kOffloadFile, ActivationPolicy::kSelective, ActivationPolicy::kBalance})
    if (name == activation_policy_name(p)) return p;
  fail(ErrorCode::kInvalidArgument, "unknown activation policy '", name,
       "' (known: none, recompute, offload-host, offload-file, selective, balance)");
}

bool policy_offloads(ActivationPolicy policy) {
  return policy == ActivationPolicy::kOffloadHost || policy == ActivationPolicy::kOffloadFile ||
         policy == ActivationPolicy::kSelective || policy == ActivationPolicy::kBalance;
}

std::vector<double> activation_peak_bytes(const Schedule& schedule, const CostModel& costs) {
  std::vector<double> out;
  for (const auto& list : schedule.ranks) out.push_back(rank_peak(list, costs));
  return out;
}

std::vector<int> activation_peak_units(const Schedule& schedule) {
  const CostModel unit;
  std::vector<int> out;
  for (const auto& list : schedule.ranks) {
    int units = 0, peak = 0;
    for (const Action& a : list) {
      units += activation_delta(a, unit, false).units;
      peak = std::max(peak, units);
    }
    out.push_back(peak);
  }
  return out;
}

double min_activation_budget(const Schedule& schedule, const CostModel& costs) {
  check_plain(schedule);
  double worst = 0.0;
  for (const auto& list : schedule.ranks)
    worst = std::max(worst, rank_peak(rewrite(list, candidates_of(list), false), costs));
  return worst;
}

std::vector<double> offloaded_bytes_per_rank(const Schedule& schedule, const CostModel& costs) {
  std::vector<double> out;
  for (const auto& list : schedule.ranks) {
    double b = 0.0;
    for (const Action& a : list)
      if (a.kind == ActionKind::kOffload) b += costs.mem_b(a.stage);
    out.push_back(b);
  }
  return out;
}

std::vector<int> recomputes_per_rank(const Schedule& schedule) {
  std::vector<int> out;
  for (const auto& list : schedule.ranks) {
    int n = 0;
    for (const Action& a : list) n += a.kind == ActionKind::kRecompute;
    out.push_back(n);
  }
  return out;
}

Schedule apply_activation_policy(const Schedule& schedule, ActivationPolicy policy, const CostModel& costs,
                                 double budget_bytes) {
  check_plain(schedule);
  if (policy == ActivationPolicy::kNone) return schedule;
  if (policy == ActivationPolicy::kBalance) return balance_activations(schedule, costs);
  Schedule out = schedule;
  if (policy != ActivationPolicy::kSelective) {
    const bool recompute = policy == ActivationPolicy::kRecompute;
    for (auto& list : out.ranks) list = rewrite(list, candidates_of(list), recompute);
    return out;
  }
  PF_CHECK_ARG(std::isfinite(budget_bytes) && budget_bytes > 0, "activation policy selective: the budget must be > 0 bytes, got ",
               budget_bytes);
  // Feasibility first, so the message can name the smallest budget that works.
  const double need = min_activation_budget(schedule, costs);
  if (need > budget_bytes) {
    int worst_rank = 0;
    for (int r = 0; r < schedule.num_ranks(); ++r)
      if (rank_peak(rewrite(schedule.ranks[r], candidates_of(schedule.ranks[r]), false), costs) >= need) {
        worst_rank = r;
        break;
      }
    std::ostringstream msg;
    msg.precision(17);
    msg << "activation budget " << budget_bytes << " bytes per rank cannot be met by schedule '" << schedule.name
        << "': rank " << worst_rank << " needs " << need
        << " bytes even with every context offloaded; smallest budget that works: "
        << static_cast<long long>(std::ceil(need)) << " bytes";
    fail(ErrorCode::kInvalidArgument, msg.str());
  }
  // Lifetime of a context: from the end of its F to the start of its B on the simulated clock
  // (the cost model's times, when it has them for every stage), else the distance in the list.
  std::vector<std::vector<double>> f_end(static_cast<size_t>(schedule.num_ranks())), b_start(f_end.size());
  const bool timed = costs.num_stages() == schedule.num_stages();
  if (timed) {
    const SimulationResult sim = simulate(schedule, costs);
    for (size_t r = 0; r < f_end.size(); ++r) {
      for (const TimedAction& ta : sim.timeline.ranks[r]) {
        f_end[r].push_back(ta.end);
        b_start[r].push_back(ta.start);
      }
    }
  }
  for (size_t r = 0; r < out.ranks.size(); ++r) {
    auto& list = out.ranks[r];
    std::vector<Candidate> cands = candidates_of(list);
    auto life = [&](const Candidate& c) {
      return timed ? b_start[r][static_cast<size_t>(c.b)] - f_end[r][static_cast<size_t>(c.f)]
                   : static_cast<double>(c.b - c.f);
    };
    std::stable_sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
      const double la = life(a), lb = life(b);
      if (la != lb) return la > lb;
      return a.f < b.f;
    });
    std::vector<Candidate> chosen;
    size_t next = 0;
    while (rank_peak(rewrite(list, chosen, false), costs) > budget_bytes && next < cands.size())
      chosen.push_back(cands[next++]);
    list = rewrite(list, chosen, false);
  }
  return out;
}

ActivationPlan plan_activation(const Schedule& schedule, ActivationPolicy policy, const CostModel& costs,
                               double budget_bytes) {
  ActivationPlan plan;
  plan.min_budget = min_activation_budget(schedule, costs);
  plan.schedule = apply_activation_policy(schedule, policy, costs, budget_bytes);
  plan.peak_bytes = activation_peak_bytes(plan.schedule, costs);
  plan.peak_units = activation_peak_units(plan.schedule);
  plan.offloaded_bytes = offloaded_bytes_per_rank(plan.schedule, costs);
  plan.recomputes = recomputes_per_rank(plan.schedule);
  for (size_t r = 0; r < plan.offloaded_bytes.size(); ++r)
    plan.transfer_time.push_back(costs.transfer_bandwidth > 0 ? 2.0 * plan.offloaded_bytes[r] / costs.transfer_bandwidth
                                                              : 0.0);
  return plan;
}

}  // namespace pf::sched
