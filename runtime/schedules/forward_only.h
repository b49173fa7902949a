// The forward-only schedule of a placement: what evaluation runs through a pipeline. Every rank
// runs its stages' forwards micro-batch by micro-batch (the forward phase of GPipe), with the
// SEND_F/RECV_F of every cross-rank hand-over already in place; no backward, no update. Ranks
// that run consecutive stages hand the activation over in the rank, as the executor does for
// any schedule.
#pragma once

#include "runtime/schedules/ir.h"

namespace pf::sched {

// chain_stages > 0: only stages [0, chain_stages) run (the first pipeline of a schedule that trains
// two copies of the model, Schedule::pipelines). kInvalidArgument for micro_batches < 1, a
// chain_stages beyond the placement's stages or a schedule size past the limits.
Schedule forward_only_schedule(const Placement& placement, int micro_batches, int chain_stages = 0);

}  // namespace pf::sched
