// "bitpipe": BitPipe (Wu et al. 2024), two pipelines in opposite directions over the same p ranks,
// each a V over its 2p chunks, so every rank holds four stages and the two copies of the model
// train on half of the micro-batches each (Schedule::pipelines = 2).
//
// Stages 0..2p-1 are the down pipeline: model stage j on rank v(j) = j for j < p, else 2p-1-j
// (zb-v's placement). Stages 2p..4p-1 are the up pipeline: model stage j on rank p-1-v(j). So the
// two V's mirror each other, a rank's first and last chunk of each pipeline meet on rank 0 or
// p-1, and the hand-over in the V's turn (model stages p-1 and p) stays on one rank. Micro-batches
// [0, m/2) go down, [m/2, m) up.
//
// The order is built by list scheduling with the costs given (the registry uses unit costs, F = 1,
// BW = 2), the ranks run forward in time together: a free rank runs, among its four stages' next
// forward and next full backward (BW, as in BitPipe and Chimera) whose inputs have arrived, a
// backward first (or, by a switch, a forward), among forwards the deepest model stage first (or the
// oldest), and among backwards the shallowest (or the deepest); a pipeline admits a new micro-batch
// into its first stage only while fewer than `cap` of its micro-batches are between their first
// forward and their first-stage backward. Every cap from 1 to p (16 of them, evenly spread, beyond
// p = 16) with all eight settings of the three switches is built and the shortest makespan (then the
// smallest peak of in-flight micro-batches on a rank) wins, so a rank holds at most 4p chunk
// contexts whatever m (two pipelines x p micro-batches x two chunks; zb-v: 2p). Every stage runs its
// F's and BW's in micro-batch order.
//
// Eager gradient synchronisation: each stage's ALLREDUCE comes right after its last BW, so its
// gradients go to the sibling stage while the rank goes on; the STEPs close every rank's list, each
// adding its sibling's gradients (Schedule::pipelines). Weights: two copies of every stage.
#pragma once

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// The placement above: p ranks, 4p stages (kCustom).
Placement bitpipe_placement(int ranks);

// `costs` must have 4 * ranks stages; micro_batches must be even (>= 2). Throws kInvalidArgument
// naming the argument otherwise.
Schedule generate_bitpipe(int ranks, int micro_batches, const CostModel& costs);

}  // namespace pf::sched
