#include "runtime/schedules/comparison.h"

#include <algorithm>
#include <set>

#include "runtime/core/error.h"
#include "runtime/schedules/lowering.h"

namespace pf::sched {

std::vector<std::pair<double, double>> activation_over_time(const Schedule& schedule, const SimulationResult& result,
                                                            const CostModel& costs, int rank) {
  const auto& list = schedule.ranks[static_cast<size_t>(rank)];
  const auto& timed = result.timeline.ranks[static_cast<size_t>(rank)];
  std::set<std::pair<int, int>> recomputed;
  for (const Action& a : list)
    if (a.kind == ActionKind::kRecompute) recomputed.insert({a.stage, a.micro_batch});
  // The deltas in the rank's list order (as the peak counts them), placed at each action's end.
  std::vector<std::pair<double, double>> changes;
  for (size_t i = 0; i < list.size() && i < timed.size(); ++i) {
    const ActivationDelta d = activation_delta(list[i], costs, recomputed.count({list[i].stage, list[i].micro_batch}) > 0);
    if (d.bytes != 0.0) changes.emplace_back(timed[i].end, d.bytes);
  }
  std::stable_sort(changes.begin(), changes.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<double, double>> out = {{0.0, 0.0}};
  double bytes = 0.0;
  for (const auto& [t, delta] : changes) {
    bytes += delta;
    if (out.back().first == t) out.back().second = bytes;
    else out.emplace_back(t, bytes);
  }
  return out;
}

ScheduleComparison compare_schedule(const ScheduleRequest& request, double message_bytes) {
  PF_CHECK_ARG(message_bytes >= 0.0, "message bytes must be >= 0, got ", message_bytes);
  ScheduleComparison c;
  c.name = request.name;
  // The request's costs are one rank's share of the model; with v chunks per rank each stage is
  // 1/v of it. Only zb-auto's order depends on the costs, and it has one chunk per rank, so it is
  // generated under the costs it runs with.
  c.schedule = lower_communication(make_schedule(request));
  c.chunks = c.schedule.num_stages() / std::max(1, c.schedule.num_ranks());
  UniformCosts scaled = request.costs;
  for (double* x : {&scaled.t_f, &scaled.t_b, &scaled.t_w, &scaled.m_b, &scaled.m_w}) *x /= c.chunks;
  const CostModel expanded = scaled.expand(c.schedule.num_stages());
  c.result = simulate(c.schedule, expanded);
  for (const auto& list : c.schedule.ranks)
    for (const Action& a : list)
      if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB) ++c.messages;
  c.moved_bytes = static_cast<double>(c.messages) * message_bytes;
  for (int r = 0; r < c.schedule.num_ranks(); ++r)
    c.memory.push_back(activation_over_time(c.schedule, c.result, expanded, r));
  return c;
}

}  // namespace pf::sched
