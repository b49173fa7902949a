// Whole-stage actions (STEP, ALLREDUCE: micro_batch -1) placed where they belong: right after the
// stage's last weight gradient (W or BW) on the stage's rank.
#pragma once

#include "runtime/schedules/ir.h"

namespace pf::sched {

// Inserts `kind` (kStep or kAllReduce) for every stage that has none, right after that stage's
// last W/BW on its rank (at the end of the rank's list when the stage has none). Several stages
// ending at one point keep stage order; an ALLREDUCE goes before a STEP that already follows.
void insert_after_last_weight_gradient(Schedule& schedule, ActionKind kind);

// The data-parallel form of a schedule: an ALLREDUCE of each stage's gradients right after the
// stage's last W/BW, so that it overlaps the rest of the rank's backward (the eager gradient
// synchronisation of BFPP/BitPipe) instead of waiting for the flush. Stages that have one keep it.
Schedule add_gradient_allreduce(const Schedule& schedule);

}  // namespace pf::sched
