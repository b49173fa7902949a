#include "runtime/schedules/stage_actions.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/core/error.h"

namespace pf::sched {

void insert_after_last_weight_gradient(Schedule& s, ActionKind kind) {
  PF_INTERNAL_CHECK(kind == ActionKind::kStep || kind == ActionKind::kAllReduce,
                    "insert_after_last_weight_gradient: ", action_kind_name(kind), " is not a whole-stage action");
  for (int r = 0; r < s.num_ranks(); ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    std::vector<std::pair<int, int>> at;  // (insert after index, stage)
    for (int st : s.placement.stages_of(r)) {
      const bool present = std::any_of(list.begin(), list.end(),
                                       [&](const Action& a) { return a.kind == kind && a.stage == st; });
      if (present) continue;
      int last = static_cast<int>(list.size()) - 1;
      for (int i = static_cast<int>(list.size()) - 1; i >= 0; --i) {
        const Action& a = list[static_cast<size_t>(i)];
        if (a.stage == st && (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward)) {
          last = i;
          break;
        }
      }
      at.emplace_back(last, st);
    }
    // Back to front, so earlier positions stay valid; equal positions keep stage order.
    std::sort(at.begin(), at.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second > b.second;
    });
    for (const auto& [pos, st] : at) list.insert(list.begin() + pos + 1, Action{kind, st, -1});
  }
}

Schedule add_gradient_allreduce(const Schedule& schedule) {
  Schedule s = schedule;
  insert_after_last_weight_gradient(s, ActionKind::kAllReduce);
  return s;
}

}  // namespace pf::sched
