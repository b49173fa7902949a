// The exact schedule solver (runtime/schedules/optimal_schedule.h): known optima, bounds, every
// heuristic as an upper bound, the cap, the simulator's agreement, the time limit, refusals and
// zb-auto's exact hook. Skips itself in a build without GLPK.
#include "runtime/schedules/optimal_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/zb_auto.h"

namespace pf::sched {
namespace {

class OptimalScheduleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!optimal_solver_available()) GTEST_SKIP() << "built without GLPK (libglpk-dev)";
  }
};

// The zero-bubble paper's cost ratio T_F : T_B : T_W = 1 : 1 : 0.5 with T_comm 0.03.
CostModel paper_costs(int p) { return CostModel::uniform(p, 1.0, 1.0, 0.5, 0.03); }

OptimalOptions limit(double seconds) {
  OptimalOptions o;
  o.time_limit_s = seconds;
  return o;
}

// Checks what every result must satisfy: a valid, complete F/B/W schedule with one stage per rank,
// W's in micro-batch order, the simulator's makespan equal to the solver's, and the cap respected.
void expect_sound(const OptimalResult& r, int p, int m, const CostModel& costs, double cap) {
  const ValidationReport report = validate(r.schedule);
  ASSERT_TRUE(report.ok()) << report.to_string();
  const ValidationReport lowered = validate(lower_communication(r.schedule));
  EXPECT_TRUE(lowered.ok()) << lowered.to_string();
  EXPECT_EQ(r.schedule.num_ranks(), p);
  EXPECT_EQ(r.schedule.num_micro_batches, m);
  EXPECT_EQ(r.schedule.placement, Placement::one_per_rank(p));
  for (int s = 0; s < p; ++s) {
    std::vector<int> in_order(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) in_order[static_cast<size_t>(i)] = i;
    EXPECT_EQ(weight_gradient_order(r.schedule, s), in_order) << "stage " << s;
    for (const Action& a : r.schedule.ranks[static_cast<size_t>(s)])
      EXPECT_NE(a.kind, ActionKind::kBackward) << "fused BW on rank " << s;
  }
  const SimulationResult sim = simulate(r.schedule, costs);
  EXPECT_NEAR(sim.makespan, r.makespan, 1e-6 * r.makespan);
  for (int s = 0; s < p; ++s)
    EXPECT_LE(sim.peak_activation_bytes[static_cast<size_t>(s)], cap * costs.mem_b(s) * (1 + 1e-9)) << "rank " << s;
  EXPECT_LE(makespan_lower_bound(p, m, costs), r.makespan * (1 + 1e-9));
  if (r.proven) {
    EXPECT_DOUBLE_EQ(r.lower_bound, r.makespan);
  }
}

TEST_F(OptimalScheduleTest, OneRankRunsItsWorkBackToBack) {
  CostModel costs = CostModel::uniform(1, 1.0, 2.0, 0.5);
  const OptimalResult r = solve_optimal_schedule(1, 3, costs, 2.0, limit(10));
  expect_sound(r, 1, 3, costs, 2.0);
  EXPECT_TRUE(r.proven);
  EXPECT_NEAR(r.makespan, 3 * (1.0 + 2.0 + 0.5), 1e-9);
}

TEST_F(OptimalScheduleTest, TwoRanksOneMicroBatchClosedForm) {
  CostModel costs;
  costs.t_f = {1.0, 2.0};
  costs.t_b = {1.5, 1.0};
  costs.t_w = {0.5, 3.0};
  costs.t_comm = 0.25;
  const double c = costs.t_comm;
  // Rank 0 ends after the micro-batch's round trip and its W; rank 1 after its F, B and W.
  const double rank0 = 1.0 + c + 2.0 + 1.0 + c + 1.5 + 0.5;
  const double rank1 = 1.0 + c + 2.0 + 1.0 + 3.0;
  const OptimalResult r = solve_optimal_schedule(2, 1, costs, 1.0, limit(10));
  expect_sound(r, 2, 1, costs, 1.0);
  EXPECT_TRUE(r.proven);
  EXPECT_NEAR(r.makespan, std::max(rank0, rank1), 1e-9);
}

TEST_F(OptimalScheduleTest, FourRanksEightMicroBatchesUnitCostsBetweenBounds) {
  const int p = 4, m = 8;
  const CostModel costs = CostModel::uniform(p);
  GeneratorOptions o;
  o.ranks = p;
  o.micro_batches = m;
  const double h2 = simulate(generate_schedule("zb-h2", o), costs).makespan;
  const OptimalResult r = solve_optimal_schedule(p, m, costs, 2.0 * p, limit(60));
  expect_sound(r, p, m, costs, 2.0 * p);
  EXPECT_TRUE(r.proven);
  // Rank p-1 starts after p-1 forwards and then has m (T_F + T_B + T_W) of work.
  EXPECT_GE(r.makespan, m * 3.0 + (p - 1) * 1.0 - 1e-9);
  EXPECT_LE(r.makespan, h2 + 1e-9);
}

// Every one-stage-per-rank heuristic that fits the cap is an upper bound on the optimum.
TEST_F(OptimalScheduleTest, OptimumIsAtMostEveryHeuristicThatFits) {
  for (int p : {2, 3}) {
    for (int m : {p, 2 * p}) {
      for (double cap : {1.0 * p, 2.0 * p}) {
        for (const CostModel& costs : {CostModel::uniform(p), paper_costs(p)}) {
          SCOPED_TRACE(testing::Message() << "p " << p << " m " << m << " cap " << cap << " t_w " << costs.t_w[0]);
          const OptimalResult r = solve_optimal_schedule(p, m, costs, cap, limit(30));
          expect_sound(r, p, m, costs, cap);
          EXPECT_TRUE(r.proven);
          const std::vector<Schedule> heuristics = one_stage_per_rank_heuristics(p, m, costs, cap);
          ASSERT_EQ(heuristics.size(), 5u);  // zb-auto fits every cap >= p
          for (const Schedule& h : heuristics) {
            const SimulationResult sim = simulate(h, costs);
            if (fits_memory_cap(sim, costs, cap)) {
              EXPECT_LE(r.makespan, sim.makespan * (1 + 1e-9)) << h.name;
            }
          }
        }
      }
    }
  }
}

// The search itself, not only the heuristics: here no heuristic order is optimal (zb-auto's is 3%
// longer).
TEST_F(OptimalScheduleTest, SolverBeatsTheHeuristics) {
  const int p = 3, m = 6;
  const CostModel costs = paper_costs(p);
  const OptimalResult r = solve_optimal_schedule(p, m, costs, p, limit(30));
  expect_sound(r, p, m, costs, p);
  EXPECT_TRUE(r.proven);
  EXPECT_EQ(r.source, "milp");
}

// M_W > M_B: the memory after a B binds, not only the memory after an F.
TEST_F(OptimalScheduleTest, WeightGradientMemoryCountsAgainstTheCap) {
  const int p = 2, m = 4;
  CostModel costs = CostModel::uniform(p, 1.0, 1.0, 1.0, 0.0, 1.0, 1.5);
  const OptimalResult tight = solve_optimal_schedule(p, m, costs, 2.0, limit(30));
  expect_sound(tight, p, m, costs, 2.0);
  const OptimalResult loose = solve_optimal_schedule(p, m, costs, 8.0, limit(30));
  expect_sound(loose, p, m, costs, 8.0);
  EXPECT_TRUE(tight.proven && loose.proven);
  EXPECT_GT(tight.makespan, loose.makespan);
}

TEST_F(OptimalScheduleTest, TimeLimitReturnsTheBestOrderFound) {
  const int p = 4, m = 8;
  const CostModel costs = paper_costs(p);
  const OptimalResult r = solve_optimal_schedule(p, m, costs, p, limit(0.05));
  expect_sound(r, p, m, costs, p);
  EXPECT_FALSE(r.proven);
  EXPECT_LT(r.solve_seconds, 5.0);
}

void expect_refused(int p, int m, const CostModel& costs, double cap, const OptimalOptions& o,
                    const std::string& naming) {
  try {
    solve_optimal_schedule(p, m, costs, cap, o);
    ADD_FAILURE() << "accepted; expected an error naming " << naming;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(naming), std::string::npos) << e.what();
  }
}

// Refused before GLPK is needed, so this runs in a build without it too.
TEST(OptimalScheduleArgumentsTest, RefusesBadArguments) {
  const OptimalOptions o = limit(1);
  expect_refused(0, 2, CostModel::uniform(1), 1, o, "ranks");
  expect_refused(2, 0, CostModel::uniform(2), 1, o, "micro_batches");
  expect_refused(4, 20, CostModel::uniform(4), 8, o, "kMaxOptimalOrderVariables");
  expect_refused(64, 2, CostModel::uniform(64), 8, o, "limit of 16");
  expect_refused(2, 2, CostModel::uniform(3), 2, o, "t_f");
  expect_refused(2, 2, CostModel::uniform(2, 1, 1, 0), 2, o, "t_w");
  expect_refused(2, 2, CostModel::uniform(2), 0.5, o, "mem_cap_in_mb_units");
  expect_refused(2, 2, CostModel::uniform(2, 1, 1, 1, 0, 1, 3), 2, o, "M_W");
  expect_refused(2, 2, CostModel::uniform(2), 2, limit(0), "time_limit_s");
}

TEST_F(OptimalScheduleTest, ZbAutoUsesAProvenShorterOrder) {
  const int p = 3, m = 6;
  const CostModel costs = paper_costs(p);
  const ZbAutoOptions heuristic_only;
  const double heuristic = simulate(generate_zb_auto(p, m, costs, p, heuristic_only), costs).makespan;
  ZbAutoOptions exact = heuristic_only;
  exact.exact_time_limit_s = 30;
  const Schedule s = generate_zb_auto(p, m, costs, p, exact);
  EXPECT_TRUE(validate(s).ok());
  EXPECT_EQ(s.name, "zb-auto");
  const double optimum = solve_optimal_schedule(p, m, costs, p, limit(30)).makespan;
  EXPECT_LT(optimum, heuristic);
  EXPECT_NEAR(simulate(s, costs).makespan, optimum, 1e-6 * optimum);

  ZbAutoOptions bad;
  bad.exact_time_limit_s = -1;
  EXPECT_THROW(generate_zb_auto(p, m, costs, p, bad), Error);
}

}  // namespace
}  // namespace pf::sched
