// Minimum-makespan F/B/W orders for small pipelines, solved exactly as a MILP (GLPK, milp.h).
//
// Setting: p ranks, one stage per rank (stage s on rank s), m micro-batches, per-stage T_F, T_B, T_W
// (all > 0), T_comm between ranks, and a memory cap on rank s of mem_cap_in_mb_units * M_B(s), with
// M_B / M_W as in CostModel (a micro-batch holds M_B from its F to its B, M_W from its B to its W).
// The semantics are the simulator's (simulator.h), so simulate(result.schedule).makespan equals
// result.makespan.
//
// Formulation. Start times f(s,i), b(s,i), w(s,i) >= 0 and the makespan C (minimised):
//   f(s,i) >= f(s-1,i) + T_F(s-1) + T_comm     b(s,i) >= b(s+1,i) + T_B(s+1) + T_comm
//   b(s,i) >= f(s,i) + T_F(s)                  w(s,i) >= b(s,i) + T_B(s)
//   C >= w(s,m-1) + T_W(s)                     C >= f(s,0) + m (T_F + T_B + T_W)(s)   (a valid cut)
// FIFO: on every stage the F's, the B's and the W's each run in micro-batch order
// (f(s,i+1) >= f(s,i) + T_F(s), likewise b and w). For the W's this is required (gradients
// accumulate in the sequential reference's order, the bitwise-equality rule). For all three it loses
// nothing: micro-batches are identical, so in any feasible schedule give the k-th F (B, W) of every
// stage, by start time, the label k. Each rule still holds: e.g. the first k F's of stage s start by
// the k-th one's start and are k distinct micro-batches, so k F's of stage s-1 ended T_comm before
// it, hence the k-th of stage s-1 did; the same counting covers B after B of s+1, B after F and W
// after B. Memory depends on counts only, so it is unchanged. Hence FIFO is optimal for makespan.
//
// With FIFO a rank's order is a merge of its three chains, fixed by one binary per pair that the
// precedences leave open: x_FB(s,i,j) = [F(s,i) before B(s,j)] for i > j (F(i) precedes B(j) for
// i <= j anyway), x_FW(s,i,j) and x_BW(s,i,j) likewise for i > j. One action at a time per rank is
// the disjunctive pair  later >= earlier + T_earlier - M (1 - x)  in both directions, with M an
// upper bound on the makespan (the best heuristic order that fits the cap; C <= M as well).
//
// Memory, exactly: it changes only when an action runs, so the peak is the largest value right
// after some action. Writing n_B, n_W for the B's and W's before F(s,i) (all of micro-batches < i):
// after F(s,i) it is (i+1 - n_B) M_B + (n_B - n_W) M_W <= cap, which with n_B = i - sum_j x_FB(s,i,j),
// n_W = i - sum_j x_FW(s,i,j) is the linear row
//   (M_B - M_W) sum_{j<i} x_FB(s,i,j) + M_W sum_{j<i} x_FW(s,i,j) <= cap - M_B.
// After B(s,j) (only binding when M_W > M_B): M_B sum_{i>j} x_FB(s,i,j) + M_W (1 + sum_{k<j}
// x_BW(s,j,k)) <= cap. A W only frees memory. Valid cuts: x monotone along both indices, F before
// B(j) implies F before W(j), B(i) before W(j) implies F(i) before W(j); and x_FB(s,i,j) = 0 when
// micro-batches j..i would all hold M_B at once over the cap (likewise x_FW with min(M_B, M_W)).
//
// Limits: 1.5 p m (m-1) binaries; sizes past kMaxOptimalOrderVariables are refused before anything
// is built. GLPK's branch-and-cut proves every setting of the benchmark grid (p <= 4, m <= 2p; the
// slowest, p = 4, m = 8, cap p, in about 20 s; docs/SCHEDULES.md, "Optimal schedules"); larger ones
// usually end at the time limit with the best order found.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {

// The largest model solve_optimal_schedule builds: ranks * 1.5 * m * (m - 1) order binaries.
constexpr int kMaxOptimalOrderVariables = 1500;
constexpr int kMaxOptimalRanks = 16;

struct OptimalOptions {
  // Wall-clock limit of the solve, > 0. When it runs out the best order found is returned with
  // proven = false (at worst the best heuristic order that fits the cap).
  double time_limit_s = 10.0;
};

struct OptimalResult {
  // Unlowered F/B/W actions, one stage per rank, each stage's STEP right after its last W.
  Schedule schedule;
  double makespan = 0.0;     // of `schedule` under the costs (= the simulator's)
  double lower_bound = 0.0;  // makespan_lower_bound(...); makespan when proven
  bool proven = false;       // makespan is the minimum under the cap
  double solve_seconds = 0.0;
  // "milp" when the solver's order is returned, else the heuristic whose order was not beaten
  // ("zb-auto", "zb-h2", ..., "sequential").
  std::string source;
};

// Throws kInvalidArgument (naming the argument) for ranks < 1, micro_batches < 1, a size past the
// limits above, costs without `ranks` stages or with a zero T_F/T_B/T_W, a cap < 1 or a stage whose
// M_W exceeds its cap, or a bad time limit; kUnimplemented when the build has no GLPK.
OptimalResult solve_optimal_schedule(int ranks, int micro_batches, const CostModel& costs,
                                     double mem_cap_in_mb_units, const OptimalOptions& options = {});

// A lower bound on any schedule's makespan (cap or not): the larger of
//  * max over s of: the earliest start of rank s, sum_{k<s} (T_F(k) + T_comm), plus its work
//    m (T_F + T_B + T_W)(s);
//  * the last micro-batch's path: F(m-1, 0) starts after m-1 F's on rank 0, then goes through every
//    F and every B (2 (p-1) transfers) and ends with W(m-1, 0).
double makespan_lower_bound(int ranks, int micro_batches, const CostModel& costs);

// True when this build has the MILP solver (GLPK).
bool optimal_solver_available();

// The one-stage-per-rank heuristic orders the solver starts from (and the benchmark compares with):
// gpipe, 1f1b, zb-h1, zb-h2 and zb-auto for these costs and cap (left out when no zb-auto order
// fits it). Each keeps its generator's name; the first four need not fit the cap.
std::vector<Schedule> one_stage_per_rank_heuristics(int ranks, int micro_batches, const CostModel& costs,
                                                    double mem_cap_in_mb_units);

// True when every rank's simulated peak activation memory is within mem_cap_in_mb_units * M_B(s).
bool fits_memory_cap(const SimulationResult& sim, const CostModel& costs, double mem_cap_in_mb_units);

}  // namespace pf::sched
