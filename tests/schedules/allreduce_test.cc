// Data parallelism in the schedule engine: add_gradient_allreduce places one ALLREDUCE per stage
// right after its last W/BW (before its STEP), and the simulator runs ALLREDUCE in the background.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/stage_actions.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

Schedule make(const char* name, int p, int m, int v = 1) {
  ScheduleRequest r;
  r.name = name;
  r.ranks = p;
  r.micro_batches = m;
  r.chunks = v;
  return make_schedule(r);
}

int index_of(const std::vector<Action>& list, ActionKind kind, int stage, int mb) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == Action{kind, stage, mb}) return static_cast<int>(i);
  return -1;
}

TEST(AddGradientAllreduce, OnePerStageRightAfterItsLastWeightGradient) {
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b", "zb-v"}) {
    const int v = std::string(name) == "interleaved-1f1b" || std::string(name) == "zb-v" ? 2 : 1;
    const Schedule s = add_gradient_allreduce(lower_communication(make(name, 2, 4, v)));
    validate_or_throw(s);
    for (int st = 0; st < s.num_stages(); ++st) {
      const auto& list = s.ranks[static_cast<size_t>(s.placement.rank_of(st))];
      const int ar = index_of(list, ActionKind::kAllReduce, st, -1);
      ASSERT_GE(ar, 1) << name << " stage " << st;
      const Action& before = list[static_cast<size_t>(ar - 1)];
      EXPECT_TRUE((before.stage == st &&
                   (before.kind == ActionKind::kBackwardWeight || before.kind == ActionKind::kBackward)) ||
                  before.kind == ActionKind::kAllReduce)
          << name << ": " << action_to_string(before) << " precedes " << st << "ALLREDUCE";
      EXPECT_LT(ar, index_of(list, ActionKind::kStep, st, -1)) << name;
    }
    // Idempotent: a stage that has one keeps it.
    EXPECT_EQ(add_gradient_allreduce(s), s) << name;
  }
}

TEST(SimulateAllreduce, RunsInTheBackgroundOneAfterAnotherPerRank) {
  // zb-v, p = 2: each rank holds two stages; each ALLREDUCE takes 10 units against F = B = W = 1.
  const Schedule plain = lower_communication(make("zb-v", 2, 4, 2));
  const Schedule dp = add_gradient_allreduce(plain);
  CostModel c = CostModel::uniform(dp.num_stages());
  const SimulationResult base = simulate(plain, c);
  c.t_allreduce_stage.assign(static_cast<size_t>(dp.num_stages()), 10.0);
  const SimulationResult r = simulate(dp, c);
  // The rank's other actions do not wait for the reductions: the same busy time...
  for (int rank = 0; rank < dp.num_ranks(); ++rank) EXPECT_EQ(r.busy[rank], base.busy[rank]);
  // ... and the step ends when the last reduction does: a rank's two reductions run one after
  // the other, the first starting no earlier than its stage's last W.
  for (int rank = 0; rank < dp.num_ranks(); ++rank) {
    EXPECT_GE(r.finish[rank], base.finish[rank]);
    EXPECT_LE(r.finish[rank], base.finish[rank] + 20.0);
    EXPECT_GE(r.finish[rank], 20.0);  // two serial reductions of 10
  }
  EXPECT_GT(r.makespan, base.makespan);
  EXPECT_EQ(ring_allreduce_time(1000, 1, 10, 1), 0.0);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(1000, 4, 10, 1), 2 * 3.0 / 4 * 100 + 6);
}

}  // namespace
}  // namespace pf::sched
