// Internals shared by the activation-memory passes (activation_policy.cc, balance_policy.cc): which
// saved contexts of one rank may leave the device, and the per-rank peak of a rewritten list.
#pragma once

#include <utility>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched::detail {

using ContextKey = std::pair<int, int>;  // (stage, micro-batch)

// A context of one rank that may be offloaded, recomputed or moved to a partner rank: its F and its
// B/BW have at least one compute action between them on the rank.
struct Candidate {
  ContextKey key;
  int f = 0;            // index of F in the rank's list
  int b = 0;            // index of B/BW
  int reload_slot = 0;  // RELOAD goes before original index reload_slot (prefetch point)
};

std::vector<Candidate> candidates_of(const std::vector<Action>& list);

// One action to insert into a list before original index `slot` (slot = list size: at the end).
struct Insertion {
  int slot = 0;
  Action action;
};
// `list` with the insertions (stable: insertions at one slot keep their order, before list[slot]).
std::vector<Action> insert_actions(const std::vector<Action>& list, std::vector<Insertion> insertions);

// OFFLOAD right after F and RELOAD at reload_slot for each chosen candidate (or RECOMPUTE right
// before its B/BW when `recompute`).
std::vector<Action> rewrite(const std::vector<Action>& list, const std::vector<Candidate>& chosen, bool recompute);

// Peak device-resident activation bytes along one rank's list (activation_delta).
double rank_peak(const std::vector<Action>& list, const CostModel& costs);

}  // namespace pf::sched::detail
