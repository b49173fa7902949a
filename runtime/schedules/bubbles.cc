#include "runtime/schedules/bubbles.h"

#include <algorithm>

namespace pf::sched {

double RankBubbles::total() const {
  double sum = after_last;
  for (double b : before) sum += b;
  return sum;
}

std::vector<RankBubbles> timeline_bubbles(const Timeline& timeline) {
  // The step ends with its last action or background TP collective (a rank whose compute is done
  // waits for it as for a peer).
  double makespan = 0;
  for (const auto& rank : timeline.ranks)
    for (const TimedAction& a : rank) makespan = std::max({makespan, a.end, a.has_tensor_parallel() ? a.tp.end : 0.0});
  std::vector<RankBubbles> out(timeline.ranks.size());
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    double end = 0;
    for (const TimedAction& a : timeline.ranks[r]) {
      double wait = std::max(0.0, a.start - end);
      if (is_communication(a.action.kind)) wait += std::max(0.0, a.duration());
      out[r].before.push_back(wait);
      end = std::max(end, a.end);
    }
    out[r].after_last = std::max(0.0, makespan - end);
  }
  return out;
}

}  // namespace pf::sched
