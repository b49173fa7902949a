// The bubbles of a timeline (simulated or measured): where each rank waits. A rank waits before
// an action for the gap since its previous action ended (its first action: since the step began
// at 0), and inside a SEND/RECV for the whole of it (a blocking hand-off); after its last action
// until the makespan. PipeFill (docs/PLANNING.md, "Filling the bubbles") runs other work there.
#pragma once

#include <vector>

#include "runtime/schedules/timeline.h"

namespace pf::sched {

struct RankBubbles {
  std::vector<double> before;  // [action index]: waiting before (and, for SEND/RECV, during) it
  double after_last = 0;       // from the rank's last action's end to the makespan
  double total() const;
};

// Per rank. Times in the timeline's unit; negative gaps (overlapping marks) count as 0.
std::vector<RankBubbles> timeline_bubbles(const Timeline& timeline);

}  // namespace pf::sched
