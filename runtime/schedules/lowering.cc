#include "runtime/schedules/lowering.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "runtime/core/error.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

// Durations on the planning clock: only their order matters, and all must be positive so that the
// start times on one rank strictly increase.
int64_t planning_cost(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight:
    case ActionKind::kRecompute:
      return 2;
    case ActionKind::kBackward:
      return 4;
    default:
      return 1;
  }
}

struct Item {
  int64_t time;
  int cls;  // 0: transfer event (at its producer's end), 1: a compute/other action (at its start)
  int rank;
  int index;
  Action action;
  bool operator<(const Item& o) const {
    return std::tie(time, cls, rank, index) < std::tie(o.time, o.cls, o.rank, o.index);
  }
};

}  // namespace

bool is_lowered(const Schedule& schedule) {
  for (const auto& list : schedule.ranks) {
    for (const Action& a : list) {
      if (is_communication(a.kind)) return true;
    }
  }
  return false;
}

Schedule lower_communication(const Schedule& schedule) {
  if (is_lowered(schedule)) {
    const ValidationReport report = validate(schedule);
    PF_CHECK_ARG(report.ok(), "lower_communication: schedule '", schedule.name,
                 "' already has SEND/RECV actions but is not a valid lowered schedule: ",
                 report.to_string());
    return schedule;
  }
  validate_or_throw(schedule);
  const ActionIndex index(schedule);
  const int R = schedule.num_ranks();

  // Planning clock: ranks run their lists in order; an action starts when its rank is free and its
  // producer on the neighbouring stage has finished. The schedule is valid, so this completes.
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(R)), end(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    start[static_cast<size_t>(r)].assign(schedule.ranks[static_cast<size_t>(r)].size(), -1);
    end[static_cast<size_t>(r)].assign(schedule.ranks[static_cast<size_t>(r)].size(), -1);
  }
  std::vector<int> ptr(static_cast<size_t>(R), 0);
  std::vector<int64_t> free_at(static_cast<size_t>(R), 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      const auto& list = schedule.ranks[static_cast<size_t>(r)];
      int& p = ptr[static_cast<size_t>(r)];
      while (p < static_cast<int>(list.size())) {
        const Action& a = list[static_cast<size_t>(p)];
        int64_t t = free_at[static_cast<size_t>(r)];
        if (const auto dep = stage_dependency(index, a)) {
          const ActionSlot* x = index.find(*dep);
          PF_INTERNAL_CHECK(x != nullptr, "no producer for ", action_to_string(a));
          const int64_t e = end[static_cast<size_t>(x->rank)][static_cast<size_t>(x->index)];
          if (e < 0) break;  // producer not run yet
          t = std::max(t, e);
        }
        start[static_cast<size_t>(r)][static_cast<size_t>(p)] = t;
        end[static_cast<size_t>(r)][static_cast<size_t>(p)] = t + planning_cost(a.kind);
        free_at[static_cast<size_t>(r)] = t + planning_cost(a.kind);
        ++p;
        progress = true;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    PF_INTERNAL_CHECK(ptr[static_cast<size_t>(r)] ==
                          static_cast<int>(schedule.ranks[static_cast<size_t>(r)].size()),
                      "planning run of a validated schedule stalled on rank ", r);
  }

  std::vector<std::vector<Item>> items(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    const auto& list = schedule.ranks[static_cast<size_t>(r)];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[static_cast<size_t>(i)];
      items[static_cast<size_t>(r)].push_back(
          Item{start[static_cast<size_t>(r)][static_cast<size_t>(i)], 1, r, i, a});
      const auto dep = stage_dependency(index, a);
      if (!dep || !is_compute(a.kind)) continue;  // a STEP's sibling ALLREDUCE sends no activation
      const ActionSlot* x = index.find(*dep);
      if (x->rank == r) continue;  // local hand-over
      const int64_t tau = end[static_cast<size_t>(x->rank)][static_cast<size_t>(x->index)];
      const bool forward = a.kind == ActionKind::kForward;
      const Action send{forward ? ActionKind::kSendF : ActionKind::kSendB, dep->stage, a.micro_batch};
      const Action recv{forward ? ActionKind::kRecvF : ActionKind::kRecvB, a.stage, a.micro_batch};
      items[static_cast<size_t>(x->rank)].push_back(Item{tau, 0, x->rank, x->index, send});
      items[static_cast<size_t>(r)].push_back(Item{tau, 0, x->rank, x->index, recv});
    }
  }

  Schedule out;
  out.name = schedule.name;
  out.num_micro_batches = schedule.num_micro_batches;
  out.seq_slices = schedule.seq_slices;
  out.pipelines = schedule.pipelines;
  out.placement = schedule.placement;
  out.traits = schedule.traits;
  out.ranks.resize(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r) {
    auto& v = items[static_cast<size_t>(r)];
    std::sort(v.begin(), v.end());
    for (const Item& it : v) out.ranks[static_cast<size_t>(r)].push_back(it.action);
  }
  return out;
}

}  // namespace pf::sched
