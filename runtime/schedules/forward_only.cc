#include "runtime/schedules/forward_only.h"

#include "runtime/core/error.h"

namespace pf::sched {

Schedule forward_only_schedule(const Placement& placement, int micro_batches, int chain_stages) {
  PF_CHECK_ARG(chain_stages >= 0 && chain_stages <= placement.num_stages(), "forward-only schedule: chain_stages ",
               chain_stages, " is outside [0, ", placement.num_stages(), "]");
  const int stages = chain_stages > 0 ? chain_stages : placement.num_stages();
  check_schedule_size(placement.num_ranks, stages, micro_batches, "forward-only schedule");
  PF_CHECK_ARG(micro_batches >= 1, "forward-only schedule: micro_batches must be >= 1, got ", micro_batches);
  Schedule schedule;
  schedule.name = "forward-only";
  schedule.num_micro_batches = micro_batches;
  schedule.placement = placement;
  schedule.ranks.resize(static_cast<size_t>(placement.num_ranks));
  // Micro-batch major, stage minor on every rank: each forward waits only for forwards of an
  // earlier (micro-batch, stage) pair, so no rank can wait on one that waits on it.
  for (int mb = 0; mb < micro_batches; ++mb) {
    for (int s = 0; s < stages; ++s) {
      const int rank = placement.rank_of(s);
      std::vector<Action>& list = schedule.ranks[static_cast<size_t>(rank)];
      if (s > 0 && placement.rank_of(s - 1) != rank) list.push_back({ActionKind::kRecvF, s, mb});
      list.push_back({ActionKind::kForward, s, mb});
      if (s + 1 < stages && placement.rank_of(s + 1) != rank) list.push_back({ActionKind::kSendF, s, mb});
    }
  }
  return schedule;
}

}  // namespace pf::sched
