// Activation-memory policies as a schedule pass (docs/MEMORY.md): inserts OFFLOAD / RELOAD /
// RECOMPUTE actions into every rank's list so that the validator, the simulator, the renderers and the
// executor all see them.
//
//  * none        : the schedule unchanged.
//  * recompute   : every context that lives across at least one other compute action of its rank
//                  keeps only its stage input after F; RECOMPUTE(mb, s) (rerun F) right before its
//                  B/BW.
//  * offload-host, offload-file : every such context is offloaded right after its F (OFFLOAD) and
//                  brought back early enough to prefetch (RELOAD right after the preceding B/BW of the
//                  rank, or, when there is none in between, right before the last compute action
//                  before its B/BW). The tier (host memory or a file) is the executor's business.
//  * selective   : like offload, but only as many contexts as a per-rank budget (bytes, costs.m_b /
//                  m_w / m_in) requires, longest-living first (lifetime = list distance F -> B).
//  * balance     : BPipe. Ranks are paired heaviest with lightest (by activation peak); the heavy
//                  rank OFFLOADs chosen contexts to its partner, which HOLDs them and RETURNs them
//                  in time for the owner's RELOAD, so that the pair's larger peak is as small as
//                  the pass can make it (balance_activations).
//
// Contexts whose F is directly followed by their B (no compute in between) are never touched: there is
// nothing to overlap and no memory to gain.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

enum class ActivationPolicy { kNone, kRecompute, kOffloadHost, kOffloadFile, kSelective, kBalance };

// "none", "recompute", "offload-host", "offload-file", "selective", "balance".
const char* activation_policy_name(ActivationPolicy policy);
std::vector<std::string> activation_policy_names();
// Throws kInvalidArgument naming the valid names.
ActivationPolicy parse_activation_policy(const std::string& name);
// offload-host, offload-file, selective and balance move contexts (OFFLOAD/RELOAD).
bool policy_offloads(ActivationPolicy policy);

// Applies `policy`. `budget_bytes` (selective only; > 0) is the per-rank limit on device-resident
// activation memory as counted by activation_peak_bytes. Throws kInvalidArgument when the schedule
// already has OFFLOAD/RELOAD/RECOMPUTE actions, or when selective cannot meet the budget: the message
// gives the smallest budget that works ("... smallest budget that works: N bytes").
// Selective runs with the host tier; pass selective_file = true to the executor for files.
Schedule apply_activation_policy(const Schedule& schedule, ActivationPolicy policy, const CostModel& costs,
                                 double budget_bytes = 0.0);

// Policy balance (BPipe, Kim et al. 2023). Ranks sorted by activation peak are paired heaviest with
// lightest (1F1B: 0 with p-1, 1 with p-2, ...); pairs whose heavy peak is not above the light one are
// left alone. For each pair the heavy rank sends contexts to the light one: OFFLOAD right after F on
// the owner; HOLD on the partner at its first action boundary after the offload has landed; RETURN
// on the partner at its last action boundary before the owner's prefetch point; RELOAD on the owner
// at that prefetch point (it waits for the RETURN). Boundaries come from simulating the schedule with
// `costs` (unit times when costs has none). Which contexts: the smallest target T (bisection) for
// which a sweep over the owner's list, evicting at each point above T the live context needed
// furthest in the future (Belady), keeps both ranks at or below T. Bitwise results are unchanged: the
// same tensors come back.
Schedule balance_activations(const Schedule& schedule, const CostModel& costs);

// Device-resident activation accounting along each rank's list (the simulator's rule): F adds m_b
// (m_in when the context is recomputed), RECOMPUTE adds m_b - m_in, OFFLOAD removes m_b, RELOAD adds
// it back, B turns m_b into m_w, W removes m_w, BW removes m_b; a partner rank's HOLD adds the
// owner stage's m_b and its RETURN removes it (simulator.h activation_delta). Peak per rank.
std::vector<double> activation_peak_bytes(const Schedule& schedule, const CostModel& costs);
// The same in micro-batch units (F +1, OFFLOAD -1, RELOAD +1, B/BW -1) = simulator peak_activations.
std::vector<int> activation_peak_units(const Schedule& schedule);
// The smallest per-rank budget selective can meet (= max over ranks of the peak with every eligible
// context offloaded).
double min_activation_budget(const Schedule& schedule, const CostModel& costs);
// Bytes each rank moves off the device per step (sum of m_b over its OFFLOADs; the same comes back).
std::vector<double> offloaded_bytes_per_rank(const Schedule& schedule, const CostModel& costs);
// RECOMPUTE actions per rank per step.
std::vector<int> recomputes_per_rank(const Schedule& schedule);

// Everything `pipeforge simulate --activation-policy NAME [--activation-budget BYTES]` needs in one
// call: the schedule with the policy applied and its per-rank figures.
struct ActivationPlan {
  Schedule schedule;                   // with OFFLOAD/RELOAD/RECOMPUTE inserted
  std::vector<double> peak_bytes;      // per rank: activation_peak_bytes
  std::vector<int> peak_units;         // per rank: activation_peak_units (micro-batches)
  std::vector<double> offloaded_bytes; // per rank per step (the same amount is reloaded)
  std::vector<double> transfer_time;   // per rank: 2 * offloaded / costs.transfer_bandwidth (0 if none)
  std::vector<int> recomputes;         // per rank: RECOMPUTE actions
  double min_budget = 0;               // smallest budget selective can meet for this schedule
};
ActivationPlan plan_activation(const Schedule& schedule, ActivationPolicy policy, const CostModel& costs,
                               double budget_bytes = 0.0);

}  // namespace pf::sched
