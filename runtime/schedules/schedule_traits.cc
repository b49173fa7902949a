#include "runtime/schedules/schedule_traits.h"

namespace pf::sched {

const char* schedule_family_name(ScheduleFamily family) {
  switch (family) {
    case ScheduleFamily::kSynchronous: return "synchronous";
    case ScheduleFamily::kAsynchronous: return "asynchronous";
    case ScheduleFamily::kLocalLearning: return "local-learning";
  }
  return "?";
}

std::string ScheduleTraits::describe(const std::string& name) const {
  return (windowed() ? std::string(schedule_family_name(family)) + " schedule '" : std::string("schedule '")) + name +
         "'";
}

bool operator==(const ScheduleTraits& a, const ScheduleTraits& b) {
  return a.family == b.family && a.update_interval == b.update_interval && a.weights == b.weights &&
         a.stashes_weights == b.stashes_weights && a.checkpoint_refusal == b.checkpoint_refusal &&
         a.chunks == b.chunks && a.cost_driven == b.cost_driven && a.slices_sequences == b.slices_sequences &&
         a.pipelines == b.pipelines;
}

}  // namespace pf::sched
