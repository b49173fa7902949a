// "zb-auto": the zero-bubble paper's automatic schedule (ZB-1p / ZB-2p style; Qi et al., "Zero
// Bubble Pipeline Parallelism", ICLR 2024, Section 3.1 "The heuristic algorithm").
//
// Given per-stage T_F, T_B, T_W, T_comm and activation memory M_B / M_W, and a per-rank memory cap
// in units of that rank's M_B (p for ZB-1p, 2p for ZB-2p), it builds an F/B/W order per rank:
//   * warm-up: as many F's as the cap allows without (or, by a switch, while still) delaying the
//     first B, each rank strictly fewer than the one before it;
//   * steady state: one F then one B per round, in rounds over micro-batches; W's fill every gap
//     before an F or a B whose input has not arrived yet when the W fits, and a gap shorter than
//     T_W when idling would make this rank's cumulative bubble the largest of all ranks (or always,
//     by a switch); W's also run whenever the cap would otherwise be exceeded;
//   * a rank runs at least one more F than the next rank until its F's are used up; when it is two
//     or more ahead it may (by a switch) skip an F in a round if the F would delay its next B and
//     skipping does not raise the largest cumulative bubble;
//   * when F's and B's are done, the remaining W's, in micro-batch order.
// All 8 combinations of the three switches are built and timed (the builder's times are exactly
// the simulator's), as the paper's code does (zb.py, initial_solution; its optional ILP refinement
// is not done here). The handcrafted zb-h1 and zb-h2 orders are timed too and are candidates where
// their peak memory fits the cap, so zb-auto is never worse than a fixed zero-bubble schedule within
// its cap (the greedy loses to them when T_comm is comparable to T_B, or for the makespan objective
// when T_W > T_F). The best candidate by the objective wins; ties go to the heuristic. The paper's
// objective (and its "cost" in the bubble rate) is the longest rank *span*: a rank's time from its
// own first action to its last, SimulationResult::max_span; the alternative is the makespan. W's of
// a stage are always in micro-batch order. The result has one stage per rank and passes the
// validator; its peak activation memory per rank, sum(#F-without-B) * m_b + sum(#B-without-W) * m_w,
// never exceeds the cap.
#pragma once

#include <optional>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

struct ZbAutoOptions {
  enum class Objective {
    kMaxSpan,   // shortest longest-rank span, ties by makespan (the paper's; the default)
    kMakespan,  // shortest makespan, ties by longest span
  };
  Objective objective = Objective::kMaxSpan;
  // > 0: also run the exact solver (optimal_schedule.h) for up to this many seconds and return its
  // order when it proves an optimum with a shorter makespan than the heuristic's. Needs
  // //runtime/schedules:optimal linked in; sizes it refuses, and builds without GLPK, keep the
  // heuristic's order. 0 = off.
  double exact_time_limit_s = 0.0;
};

// The exact solver behind exact_time_limit_s: a proven order shorter than heuristic_makespan, or
// nothing. //runtime/schedules:optimal installs it from a static initialiser. Thread-safe.
using ZbAutoExactSolver = std::optional<Schedule> (*)(int ranks, int micro_batches, const CostModel& costs,
                                                      double mem_limit_in_mb_units, double time_limit_s,
                                                      double heuristic_makespan);
void set_zb_auto_exact_solver(ZbAutoExactSolver solver);

// `costs` must have `ranks` stages (one per rank). mem_limit_in_mb_units >= 1: the cap of rank s is
// mem_limit_in_mb_units * costs.mem_b(s). Throws kInvalidArgument on bad arguments and
// kFailedPrecondition when no order fits the cap.
Schedule generate_zb_auto(int ranks, int micro_batches, const CostModel& costs,
                          double mem_limit_in_mb_units, const ZbAutoOptions& options = {});

// Registers "zb-auto" with the generator registry (uniform costs T_F = T_B = T_W = 1, T_comm = 0,
// M_B = 1, M_W = 0, cap p). Idempotent; also done by a static initialiser in zb_auto.cc.
void register_zb_auto_generator();

}  // namespace pf::sched
