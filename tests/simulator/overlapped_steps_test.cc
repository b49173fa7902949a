// Overlapping steps in the simulator (runtime/schedules/overlapped_steps.h): the run of several
// steps is the schedule repeated with renumbered micro-batches and an UPDATE for every STEP; the
// time per step with overlap lies between the busiest rank's work and the barrier's makespan; on
// the zero-bubble paper's setting it reaches the span that the paper's Table 5 measures.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "runtime/core/error.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/overlapped_steps.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/stage_actions.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/zb_auto.h"
#include "tests/simulator/zero_bubble_paper_data.h"

namespace pf::sched {
namespace {

Schedule gen(const std::string& name, int p, int m, int chunks = 0) {
  ScheduleRequest request;
  request.name = name;
  request.ranks = p;
  request.micro_batches = m;
  request.chunks = chunks;
  return make_schedule(request);
}

TEST(OverlappedRun, RepeatsTheStepWithRenumberedMicroBatches) {
  const Schedule one = gen("1f1b", 3, 4);
  const Schedule run = overlapped_run(one, 3);
  EXPECT_EQ(run.num_micro_batches, 12);
  for (size_t r = 0; r < one.ranks.size(); ++r) {
    ASSERT_EQ(run.ranks[r].size(), 3 * one.ranks[r].size());
    int updates = 0;
    for (size_t i = 0; i < run.ranks[r].size(); ++i) {
      const Action& a = run.ranks[r][i];
      const Action& b = one.ranks[r][i % one.ranks[r].size()];
      const int t = static_cast<int>(i / one.ranks[r].size());
      if (b.kind == ActionKind::kStep) {
        EXPECT_EQ(a.kind, ActionKind::kUpdate);
        EXPECT_EQ(a.micro_batch, 4 * t + 3);
        ++updates;
      } else {
        EXPECT_EQ(a.kind, b.kind);
        EXPECT_EQ(a.micro_batch, b.micro_batch + 4 * t);
      }
    }
    EXPECT_EQ(updates, 3) << "rank " << r;  // one stage per rank, one update per step
  }
  // The run simulates: every dependency is inside its own step or on the rank's own list.
  const SimulationResult r = simulate(run, CostModel::uniform(3));
  EXPECT_GT(r.makespan, 0.0);
}

TEST(OverlappedRun, RefusesWhatCannotOverlap) {
  EXPECT_THROW(overlapped_run(gen("pipedream", 2, 4), 2), pf::Error);
  EXPECT_THROW(overlapped_run(add_gradient_allreduce(gen("1f1b", 2, 4)), 2), pf::Error);
  EXPECT_THROW(overlapped_run(gen("1f1b", 2, 4), 0), pf::Error);
}

// Every synchronous generator, uniform costs with an update cost: the barrier's step is one
// makespan plus nothing more; with overlap a step costs at least the busiest rank's work and its
// update and at most the barrier's makespan.
TEST(StepTimes, BetweenTheWorkAndTheBarrier) {
  struct Case {
    const char* name;
    int chunks;
  };
  for (const Case c : {Case{"gpipe", 1}, Case{"1f1b", 1}, Case{"interleaved-1f1b", 2}, Case{"bfs", 2},
                       Case{"zb-h1", 1}, Case{"zb-h2", 1}, Case{"zb-v", 2}, Case{"interleaved-zb", 2},
                       Case{"dualpipe-v", 2}, Case{"v-half", 2}, Case{"v-min", 2}}) {
    const Schedule s = gen(c.name, 4, 8, c.chunks);
    CostModel costs = CostModel::uniform(s.num_stages(), 1.0, 1.0, 1.0, 0.1);
    costs.t_step = 0.5;
    const StepTimes t = simulate_step_times(s, costs);
    const SimulationResult one = simulate(s, costs);
    const double work = one.ideal + 0.5 * s.num_stages() / s.num_ranks();  // the busiest rank's passes and updates
    EXPECT_DOUBLE_EQ(t.barrier, one.makespan) << c.name;
    EXPECT_LE(t.overlapped, t.barrier + 1e-9) << c.name;
    EXPECT_GE(t.overlapped, work - 1e-9) << c.name;
  }
}

// 1F1B: rank 0 starts first and ends last, so overlap gains nothing; ZB-H2 and ZB-V spend their
// bubble on the start-up, which the next step's work fills: with overlap they cost their span.
TEST(StepTimes, ZeroBubbleSchedulesReachTheirSpan) {
  const CostModel uniform = CostModel::uniform(4);
  const StepTimes f = simulate_step_times(gen("1f1b", 4, 8), uniform);
  EXPECT_DOUBLE_EQ(f.overlapped, f.barrier);
  const StepTimes h2 = simulate_step_times(gen("zb-h2", 4, 8), uniform);
  EXPECT_LT(h2.overlapped, h2.barrier);
  EXPECT_DOUBLE_EQ(h2.overlapped, h2.span);
  EXPECT_DOUBLE_EQ(h2.overlapped, 8 * 3.0);  // m (T_F + T_B + T_W): no bubble at all
  const StepTimes v = simulate_step_times(gen("zb-v", 4, 8, 2), CostModel::uniform(8));
  EXPECT_DOUBLE_EQ(v.overlapped, v.span);
  EXPECT_DOUBLE_EQ(v.overlapped, 8 * 2 * 3.0);
}

// The setting (the paper's Table 9 costs, 1.5B, p = 8, m = 24): zb-auto under a 2p cap has
// a span bubble of 4.33% but a makespan bubble of 10.8%; with overlap a step costs its span.
TEST(StepTimes, ZbAutoOnThePaperSettingCostsItsSpan) {
  const paper::ZeroBubbleSetting& s = paper::kZeroBubbleSettings[0];
  const CostModel c = CostModel::uniform(s.p, s.t_f, s.t_b, s.t_w, s.t_comm, 1.0, paper::mw_over_mb(s));
  const Schedule z = generate_zb_auto(s.p, s.m, c, 2.0 * s.p);
  const StepTimes t = simulate_step_times(z, c);
  const double ideal = s.m * (s.t_f + s.t_b + s.t_w);
  std::printf("zb-auto 2p, 1.5B p=8 m=24: step %.3f barrier, %.3f overlapped, span %.3f; bubble %.4f / %.4f\n",
              t.barrier, t.overlapped, t.span, 1 - ideal / t.barrier, 1 - ideal / t.overlapped);
  EXPECT_NEAR(1 - ideal / t.barrier, 0.1083, 2e-4);
  EXPECT_NEAR(t.overlapped, t.span, 1e-6 * t.span);
  EXPECT_NEAR(1 - ideal / t.overlapped, 0.0433, 1e-4);
}

}  // namespace
}  // namespace pf::sched
