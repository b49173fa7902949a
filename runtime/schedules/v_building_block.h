// A V-placement order built by repeating one micro-batch's "building block" at a fixed interval —
// the construction of the controllable-memory paper (Qi et al., NeurIPS 2024), done as modulo
// scheduling: the block places micro-batch 0's F's down the V (stage 0 .. 2p-1) and B's back up, each
// as early as its input allows on a time axis folded modulo the interval I (the busiest rank's work
// per micro-batch, 2 T_F + 2 T_B + 2 T_W on uniform costs), so that on every rank no two of the
// block's actions overlap modulo I; then the W's into the rest of each rank's period, each after its
// B. Micro-batch i runs the block shifted by i * I, so every rank's list (the block's actions of
// all micro-batches sorted by that time) keeps the steady state free of conflicts. Each F, B and W
// runs as soon as it can in the block, so a micro-batch lives on a rank as briefly as the interval
// allows: its activations are held about (4p + 2) T / I micro-batch halves per rank — the paper's
// V-Min memory, about p/3 micro-batches — and the bubble is the block's length on rank 0 less one
// interval, about 4p units against 6m (the paper's 2p/(3m)). F's, B's and W's of each stage run in
// micro-batch order.
#pragma once

#include <optional>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// `costs` has 2 * ranks stages. The ranks' lists with STEPs, named `name`; nullopt when the block
// does not fit (unequal costs leave no gap long enough, even with the interval stretched to 2 I).
std::optional<Schedule> v_building_block_schedule(const char* name, int ranks, int micro_batches,
                                                  const CostModel& costs);

}  // namespace pf::sched
