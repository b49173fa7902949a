// "v-half" and "v-min": V-placement schedules under an activation-memory cap (Qi et al., "Pipeline
// Parallelism with Controllable Memory", NeurIPS 2024). Rank s holds stage s (chunk 0) and stage
// 2p-1-s (chunk 1), as in zb-v; the cap, in micro-batches of one rank (one micro-batch's saved
// activations on both of its chunks, m_b[s] + m_b[2p-1-s]), is floor((p+2)/2) for v-half and
// floor((p+4)/3) for v-min, where zb-v holds p (1F1B's rank 0: p as well).
//
// The paper builds both from repeated V-shaped building blocks; this builder reaches the same
// memory by list scheduling under the cap instead, with the costs given (the registry uses unit
// costs). It runs the ranks forward in time together, the simulator's semantics; each rank, when
// free, runs the first of:
//   * a B whose output gradient has arrived (the earlier one when both chunks' have);
//   * a chunk-1 F whose input has arrived (its memory was reserved when the micro-batch entered);
//   * a chunk-0 F whose input has arrived, when the cap still holds after it *and* after the same
//     micro-batch's chunk-1 F (every micro-batch admitted can finish its forward on this rank, so
//     the order never deadlocks on memory);
//   * the oldest pending W (always, or — by a switch — only when it ends before the next input
//     arrives);
// otherwise it idles until the next input arrives. The two orders of B and F and the two W rules
// are all built and the shortest makespan (then the shortest longest span) wins. F's, B's and W's of
// each stage run in micro-batch order, so weight gradients accumulate as in sequential training.
// A rank's peak, sum(#F-without-B) * m_b + sum(#B-without-W) * m_w over its two stages, never
// exceeds the cap.
#pragma once

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// `costs` must have 2 * ranks stages. cap_in_micro_batches >= 1 (a micro-batch needs its two
// chunks' activations at once on the last rank). Throws kInvalidArgument on bad arguments and
// kFailedPrecondition when no order fits the cap (W memory m_w > m_b can make a B not fit).
Schedule generate_capped_v(const char* name, int ranks, int micro_batches, const CostModel& costs,
                           double cap_in_micro_batches);

// The caps of the registered schedules: floor((p+2)/2) (v-half) and floor((p+4)/3) (v-min).
int v_half_cap(int ranks);
int v_min_cap(int ranks);

}  // namespace pf::sched
