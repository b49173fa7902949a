// The simulator on hand-written schedules: timing rules, memory accounting, lowered forms and the
// errors for schedules that cannot run.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"

namespace pf::sched {
namespace {

Action F(int stage, int mb) { return {ActionKind::kForward, stage, mb}; }
Action B(int stage, int mb) { return {ActionKind::kBackwardInput, stage, mb}; }
Action W(int stage, int mb) { return {ActionKind::kBackwardWeight, stage, mb}; }
Action BW(int stage, int mb) { return {ActionKind::kBackward, stage, mb}; }
Action SF(int stage, int mb) { return {ActionKind::kSendF, stage, mb}; }
Action RF(int stage, int mb) { return {ActionKind::kRecvF, stage, mb}; }
Action SB(int stage, int mb) { return {ActionKind::kSendB, stage, mb}; }
Action RB(int stage, int mb) { return {ActionKind::kRecvB, stage, mb}; }
Action STEP(int stage) { return {ActionKind::kStep, stage, -1}; }

Schedule make(int ranks, int mbs, std::vector<std::vector<Action>> lists,
              Placement placement = {}) {
  Schedule s;
  s.name = "hand";
  s.num_micro_batches = mbs;
  s.placement = placement.num_ranks ? placement : Placement::one_per_rank(ranks);
  s.ranks = std::move(lists);
  return s;
}

std::string error_of(const Schedule& s, const CostModel& c) {
  try {
    simulate(s, c);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(CostModel, UniformAndCheck) {
  CostModel c = CostModel::uniform(3, 1.0, 2.0, 0.5, 0.25, 10.0, 4.0);
  EXPECT_EQ(c.num_stages(), 3);
  EXPECT_DOUBLE_EQ(c.t_b[2], 2.0);
  EXPECT_DOUBLE_EQ(c.mem_b(1), 10.0);
  EXPECT_DOUBLE_EQ(c.mem_w(1), 4.0);
  CostModel d;
  d.t_f = d.t_b = d.t_w = {1.0, 1.0};
  EXPECT_DOUBLE_EQ(d.mem_b(0), 1.0);  // defaults
  EXPECT_DOUBLE_EQ(d.mem_w(0), 0.0);
  EXPECT_NO_THROW(d.check(2));
  EXPECT_THROW(d.check(3), Error);
  d.t_w[1] = -1.0;
  EXPECT_THROW(d.check(2), Error);
  EXPECT_THROW(CostModel::uniform(0), Error);
}

TEST(Simulator, TwoRanksForwardBackwardWithLatency) {
  // rank 0: F0 ------------ B0 W0 ; rank 1: F0 B0 W0
  const Schedule s = make(2, 1, {{F(0, 0), B(0, 0), W(0, 0)}, {F(1, 0), B(1, 0), W(1, 0)}});
  CostModel c = CostModel::uniform(2, 1.0, 2.0, 0.5, 0.25);
  const SimulationResult r = simulate(s, c);
  const auto& t0 = r.timeline.ranks[0];
  const auto& t1 = r.timeline.ranks[1];
  EXPECT_DOUBLE_EQ(t0[0].start, 0.0);
  EXPECT_DOUBLE_EQ(t0[0].end, 1.0);
  EXPECT_DOUBLE_EQ(t1[0].start, 1.25);  // F waits t_comm after its producer
  EXPECT_DOUBLE_EQ(t1[1].start, 2.25);  // same-rank handover: no wait
  EXPECT_DOUBLE_EQ(t1[1].end, 4.25);
  EXPECT_DOUBLE_EQ(t1[2].end, 4.75);
  EXPECT_DOUBLE_EQ(t0[1].start, 4.5);  // B waits for the next stage's B (not its W) + t_comm
  EXPECT_DOUBLE_EQ(t0[2].end, 7.0);
  EXPECT_DOUBLE_EQ(r.makespan, 7.0);
  EXPECT_DOUBLE_EQ(r.ideal, 3.5);
  EXPECT_DOUBLE_EQ(r.bubble_rate, 0.5);
  EXPECT_DOUBLE_EQ(r.busy[0], 3.5);
  EXPECT_DOUBLE_EQ(r.idle[0], 3.5);
  EXPECT_DOUBLE_EQ(r.idle[1], 3.5);
  EXPECT_DOUBLE_EQ(r.first_start[1], 1.25);
  EXPECT_DOUBLE_EQ(r.finish[1], 4.75);
  EXPECT_DOUBLE_EQ(r.max_span, 7.0);
}

TEST(Simulator, FusedBackwardHandsOverAtItsEnd) {
  const Schedule s = make(2, 1, {{F(0, 0), BW(0, 0)}, {F(1, 0), BW(1, 0)}});
  const SimulationResult r = simulate(s, CostModel::uniform(2, 1.0, 2.0, 0.5, 0.25));
  EXPECT_DOUBLE_EQ(r.timeline.ranks[1][1].end, 4.75);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][1].start, 5.0);  // after the whole BW + t_comm
  EXPECT_DOUBLE_EQ(r.makespan, 7.5);
}

TEST(Simulator, SameRankStagesWaitNothing) {
  // V shape on one rank: stages 0 and 1 both on rank 0, so no latency between them.
  Placement v;
  v.kind = Placement::Kind::kCustom;
  v.num_ranks = 1;
  v.stage_to_rank = {0, 0};
  const Schedule s =
      make(1, 1, {{F(0, 0), F(1, 0), B(1, 0), B(0, 0), W(1, 0), W(0, 0)}}, v);
  const SimulationResult r = simulate(s, CostModel::uniform(2, 1.0, 1.0, 1.0, 100.0));
  EXPECT_DOUBLE_EQ(r.makespan, 6.0);
  EXPECT_DOUBLE_EQ(r.bubble_rate, 0.0);
  EXPECT_DOUBLE_EQ(r.ideal, 6.0);  // several stages on a rank: their costs add up
}

TEST(Simulator, PeakActivationsAndBytes) {
  // One rank, 3 micro-batches: F F F B W B B W W.
  const Schedule s = make(1, 3, {{F(0, 0), F(0, 1), F(0, 2), B(0, 0), W(0, 0), B(0, 1), B(0, 2),
                                   W(0, 1), W(0, 2), STEP(0)}});
  const SimulationResult r = simulate(s, CostModel::uniform(1, 1, 1, 1, 0, 10.0, 4.0));
  EXPECT_EQ(r.peak_activations[0], 3);
  EXPECT_DOUBLE_EQ(r.peak_activation_bytes[0], 30.0);
  const Schedule t = make(1, 3, {{F(0, 0), B(0, 0), F(0, 1), B(0, 1), F(0, 2), B(0, 2), W(0, 0),
                                   W(0, 1), W(0, 2)}});
  const SimulationResult q = simulate(t, CostModel::uniform(1, 1, 1, 1, 0, 10.0, 4.0));
  EXPECT_EQ(q.peak_activations[0], 1);
  EXPECT_DOUBLE_EQ(q.peak_activation_bytes[0], 18.0);  // 2 pending W's * 4 + one F * 10
}

TEST(Simulator, LoweredMatchesUnlowered) {
  const Schedule plain = make(2, 2, {{F(0, 0), F(0, 1), B(0, 0), B(0, 1), W(0, 0), W(0, 1)},
                                     {F(1, 0), B(1, 0), F(1, 1), B(1, 1), W(1, 0), W(1, 1)}});
  const Schedule lowered = make(
      2, 2,
      {{F(0, 0), SF(0, 0), F(0, 1), SF(0, 1), RB(0, 0), B(0, 0), RB(0, 1), B(0, 1), W(0, 0),
        W(0, 1)},
       {RF(1, 0), F(1, 0), B(1, 0), SB(1, 0), RF(1, 1), F(1, 1), B(1, 1), SB(1, 1), W(1, 0),
        W(1, 1)}});
  const CostModel c = CostModel::uniform(2, 1.0, 1.5, 0.75, 0.3);
  const SimulationResult a = simulate(plain, c);
  const SimulationResult b = simulate(lowered, c);
  EXPECT_DOUBLE_EQ(a.makespan, b.makespan);
  EXPECT_DOUBLE_EQ(a.bubble_rate, b.bubble_rate);
  EXPECT_EQ(b.timeline.num_actions(), 20u);
  // SEND/RECV take no time; a RECV completes when the data is there.
  const auto& r1 = b.timeline.ranks[1];
  EXPECT_DOUBLE_EQ(r1[0].start, r1[0].end);
  EXPECT_DOUBLE_EQ(r1[0].end, 1.3);
  for (int r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(a.busy[static_cast<size_t>(r)], b.busy[static_cast<size_t>(r)]);
}

TEST(Simulator, ReceivePostedLateCompletesAtOnce) {
  // The RECV is reached long after the data arrived: it completes when the rank gets to it.
  const Schedule s = make(2, 1, {{F(0, 0), SF(0, 0)}, {RF(1, 0), F(1, 0)}});
  CostModel c = CostModel::uniform(2, 5.0, 1.0, 1.0, 0.5);
  const SimulationResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[1][0].end, 5.5);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[1][1].end, 10.5);
}

TEST(Simulator, PostedAndBlockingReceives) {
  // Rank 1's list has the RECV of micro-batch 1 before 1F0; rank 0 sends 0F1 only at 8.
  const Schedule s = make(2, 2, {{F(0, 0), SF(0, 0), F(0, 1), SF(0, 1)},
                                 {RF(1, 0), RF(1, 1), F(1, 0), F(1, 1)}});
  const CostModel c = CostModel::uniform(2, 4.0, 1.0, 1.0, 0.5);
  const SimulationResult posted = simulate(s, c);
  // Posted: 1F0 starts when its data is there (4.5); 1RECV_F1 completes at 8.5; 1F1 runs 8.5..12.5.
  EXPECT_DOUBLE_EQ(posted.timeline.ranks[1][2].start, 4.5);
  EXPECT_DOUBLE_EQ(posted.timeline.ranks[1][1].end, 8.5);
  EXPECT_DOUBLE_EQ(posted.makespan, 12.5);
  EXPECT_DOUBLE_EQ(posted.first_start[1], 4.5);  // the span starts at the first compute action
  // Blocking: the rank waits at 1RECV_F1 until 8.5, so 1F0 starts only then.
  SimulationOptions blocking;
  blocking.blocking_recv = true;
  const SimulationResult b = simulate(s, c, blocking);
  EXPECT_DOUBLE_EQ(b.timeline.ranks[1][2].start, 8.5);
  EXPECT_DOUBLE_EQ(b.makespan, 16.5);
}

// 1F1B, p = 2, m = 2, lowered with deferred receives (PyTorch's runtime order): each rank posts a RECV
// before the compute that its peer's matching SEND follows. Under rendezvous matching that deadlocks.
Schedule deferred_1f1b() {
  return make(2, 2, {{F(0, 0), SF(0, 0), RB(0, 0), F(0, 1), SF(0, 1), BW(0, 0), RB(0, 1), BW(0, 1)},
                     {RF(1, 0), F(1, 0), RF(1, 1), BW(1, 0), SB(1, 0), F(1, 1), BW(1, 1), SB(1, 1)}});
}

SimulationOptions posted_comm() {
  SimulationOptions o;
  o.comm = CommSemantics::kPosted;
  return o;
}

TEST(Simulator, PostedTimesDeferredReceivesThatRendezvousCannotRun) {
  const CostModel c = CostModel::uniform(2, 1.0, 1.0, 1.0, 0.5);
  EXPECT_NE(error_of(deferred_1f1b(), c).find("deadlock"), std::string::npos);
  const SimulationResult r = simulate(deferred_1f1b(), c, posted_comm());
  // rank 1: 1F0 at 0F0's end + t_comm = 1.5, 1BW0 2.5..4.5, 1F1 4.5..5.5, 1BW1 5.5..7.5.
  // rank 0: 0BW0 at 1SEND_B0 + t_comm = 5 (..7), 0BW1 at 7.5 + 0.5 = 8 (..10).
  EXPECT_DOUBLE_EQ(r.timeline.ranks[1][1].start, 1.5);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][5].start, 5.0);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][7].start, 8.0);
  EXPECT_DOUBLE_EQ(r.makespan, 10.0);
  // The posted 0RECV_B0 (posted at 1) appears when its data arrives; a RECV takes no time.
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][2].start, 5.0);
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][2].end, 5.0);
  EXPECT_DOUBLE_EQ(r.busy[0], 6.0);
  // The same compute order without SEND/RECV takes exactly as long.
  const Schedule compute = make(2, 2, {{F(0, 0), F(0, 1), BW(0, 0), BW(0, 1)}, {F(1, 0), BW(1, 0), F(1, 1), BW(1, 1)}});
  EXPECT_DOUBLE_EQ(simulate(compute, c).makespan, r.makespan);
}

TEST(Simulator, PostedMatchesRendezvousWhereBothRun) {
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
    GeneratorOptions o{4, 8};
    if (std::string(name) == "interleaved-1f1b") o.chunks = 2;
    const Schedule s = lower_communication(generate_schedule(name, o));
    const CostModel cs = CostModel::uniform(s.num_stages(), 1.0, 1.5, 0.5, 0.25);
    const SimulationResult a = simulate(s, cs), b = simulate(s, cs, posted_comm());
    EXPECT_EQ(a.makespan, b.makespan) << name;
    ASSERT_EQ(a.timeline.ranks.size(), b.timeline.ranks.size());
    for (size_t r = 0; r < a.timeline.ranks.size(); ++r)
      for (size_t i = 0; i < a.timeline.ranks[r].size(); ++i) {
        EXPECT_EQ(a.timeline.ranks[r][i].start, b.timeline.ranks[r][i].start) << name << " rank " << r << " " << i;
        EXPECT_EQ(a.timeline.ranks[r][i].end, b.timeline.ranks[r][i].end) << name << " rank " << r << " " << i;
      }
  }
}

TEST(Simulator, PostedDeadlockAndLateRecvAreErrors) {
  const CostModel c = CostModel::uniform(2);
  // Each rank sends only after a backward that needs the other's SEND.
  const Schedule cycle = make(2, 1, {{F(0, 0), RB(0, 0), BW(0, 0), SF(0, 0)}, {RF(1, 0), F(1, 0), BW(1, 0), SB(1, 0)}});
  try {
    simulate(cycle, c, posted_comm());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0 action 2 (0BW0) waits for rank 1 action 3 (1SEND_B0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1 action 1 (1F0) waits for rank 0 action 3 (0SEND_F0)"), std::string::npos) << msg;
  }
  // The consumer runs before its RECV is posted.
  const Schedule late = make(2, 1, {{F(0, 0), SF(0, 0), RB(0, 0), BW(0, 0)}, {F(1, 0), RF(1, 0), BW(1, 0), SB(1, 0)}});
  try {
    simulate(late, c, posted_comm());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 action 0 (1F0) needs 1RECV_F0, which rank 1 runs later"),
              std::string::npos)
        << e.what();
  }
  SimulationOptions both = posted_comm();
  both.blocking_recv = true;
  EXPECT_THROW(simulate(deferred_1f1b(), c, both), Error);
}

TEST(Simulator, DeadlockNamesRankActionAndDependency) {
  // rank 0 needs 1B0 before it runs 0F1; rank 1 needs 0F1 before it runs 1B0.
  const Schedule s = make(2, 2, {{F(0, 0), B(0, 0), F(0, 1), B(0, 1)},
                                 {F(1, 1), B(1, 1), F(1, 0), B(1, 0)}});
  const std::string msg = error_of(s, CostModel::uniform(2));
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 action 1 (0B0) waits for rank 1 action 3 (1B0)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1 action 0 (1F1) waits for rank 0 action 2 (0F1)"), std::string::npos)
      << msg;
}

TEST(Simulator, CrossRankCycleIsReported) {
  // rank 0 waits for 1B0 before its F0; rank 1 needs 0F0 for its F0.
  const Schedule s = make(2, 1, {{RB(0, 0), F(0, 0), B(0, 0)}, {F(1, 0), B(1, 0), SB(1, 0)}});
  const std::string msg = error_of(s, CostModel::uniform(2));
  EXPECT_NE(msg.find("deadlock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 action 0 (0RECV_B0) waits for rank 1 action 2 (1SEND_B0)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1 action 0 (1F0) waits for rank 0 action 1 (0F0)"), std::string::npos)
      << msg;
}

TEST(Simulator, UnsatisfiableDependencies) {
  // A producer nobody runs.
  const Schedule missing = make(2, 1, {{F(0, 0), B(0, 0)}, {B(1, 0)}});
  std::string msg = error_of(missing, CostModel::uniform(2));
  EXPECT_NE(msg.find("rank 1 action 0 (1B0) needs 1F0, which no rank runs"), std::string::npos)
      << msg;
  // A producer that the same rank runs later.
  const Schedule later = make(1, 1, {{W(0, 0), F(0, 0), B(0, 0)}});
  msg = error_of(later, CostModel::uniform(1));
  EXPECT_NE(msg.find("rank 0 action 0 (0W0) needs 0B0, which rank 0 runs later (action 2)"),
            std::string::npos)
      << msg;
}

TEST(Simulator, RejectsMalformedSchedules) {
  EXPECT_NE(error_of(make(1, 1, {{F(0, 0), F(0, 0)}}), CostModel::uniform(1)).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(make(1, 1, {{F(0, 3)}}), CostModel::uniform(1)).find("micro-batch 3"),
            std::string::npos);
  EXPECT_NE(error_of(make(1, 1, {{F(2, 0)}}), CostModel::uniform(1)).find("stage 2"),
            std::string::npos);
  // Cost model with the wrong number of stages.
  EXPECT_THROW(simulate(make(1, 1, {{F(0, 0)}}), CostModel::uniform(2)), Error);
}

TEST(Simulator, StepWaitsForAllWeightGradients) {
  CostModel c = CostModel::uniform(1, 1.0, 1.0, 1.0);
  c.t_step = 2.0;
  const Schedule s = make(1, 2, {{F(0, 0), F(0, 1), B(0, 0), B(0, 1), W(0, 0), W(0, 1), STEP(0)}});
  const SimulationResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.makespan, 8.0);
  EXPECT_DOUBLE_EQ(r.ideal, 6.0);  // STEP is not part of the ideal F+B+W work
  const Schedule early = make(1, 2, {{F(0, 0), F(0, 1), B(0, 0), B(0, 1), W(0, 0), STEP(0), W(0, 1)}});
  EXPECT_NE(error_of(early, c).find("0W1"), std::string::npos);
}

TEST(Simulator, EmptyRanksAreIdle) {
  Placement p;
  p.kind = Placement::Kind::kCustom;
  p.num_ranks = 2;
  p.stage_to_rank = {0};
  const Schedule s = make(2, 1, {{F(0, 0), BW(0, 0)}, {}}, p);
  const SimulationResult r = simulate(s, CostModel::uniform(1, 1, 1, 1));
  EXPECT_DOUBLE_EQ(r.makespan, 3.0);
  EXPECT_DOUBLE_EQ(r.idle[1], 3.0);
  EXPECT_EQ(r.peak_activations[1], 0);
}

// OFFLOAD and RELOAD run on the rank's copy lane: the rank's compute goes on beside them, a rank's
// copies run one after another, the B that needs a RELOAD waits for its end, and busy time is the
// compute alone (checked here against the action times themselves).
TEST(Simulator, CopiesRunOnTheCopyLaneBesideTheCompute) {
  GeneratorOptions g;
  g.ranks = 2;
  g.micro_batches = 6;
  const Schedule base = lower_communication(generate_schedule("1f1b", g));
  CostModel c = CostModel::uniform(2, 1.0, 1.0, 1.0);
  c.m_b = {1.0, 1.0};
  c.transfer_bandwidth = 2.0;  // a copy takes 0.5
  const Schedule offloaded = apply_activation_policy(base, ActivationPolicy::kOffloadHost, c);
  const SimulationResult with = simulate(offloaded, c);
  const SimulationResult without = simulate(base, c);
  for (int r = 0; r < 2; ++r) {
    double compute = 0.0, copies = 0.0, copy_lane_free = 0.0;
    std::map<std::pair<int, int>, double> reloaded;  // (stage, mb) -> RELOAD end
    for (const TimedAction& a : with.timeline.ranks[static_cast<size_t>(r)]) {
      if (is_background_copy(a.action.kind)) {
        EXPECT_NEAR(a.duration(), 0.5, 1e-12);
        EXPECT_GE(a.start, copy_lane_free - 1e-12) << "copies overlap on rank " << r;
        copy_lane_free = a.end;
        copies += a.duration();
        if (a.action.kind == ActionKind::kReload) reloaded[{a.action.stage, a.action.micro_batch}] = a.end;
      } else if (is_compute(a.action.kind)) {
        compute += a.duration();
        if (a.action.kind == ActionKind::kBackward || a.action.kind == ActionKind::kBackwardInput) {
          const auto it = reloaded.find({a.action.stage, a.action.micro_batch});
          if (it != reloaded.end()) {
            EXPECT_GE(a.start, it->second - 1e-12) << action_to_string(a.action);
          }
        }
      }
    }
    if (r == 0) {
      EXPECT_GT(copies, 0.0);  // the last rank runs each B right after its F: nothing to offload
    }
    EXPECT_DOUBLE_EQ(with.busy[static_cast<size_t>(r)], compute);  // copies are not busy time
    EXPECT_DOUBLE_EQ(with.busy[static_cast<size_t>(r)], without.busy[static_cast<size_t>(r)]);
  }
  // Overlapped copies cost little: far less than the copies' own time on the critical path.
  double copy_time = 0.0;
  for (const TimedAction& a : with.timeline.ranks[0])
    if (is_background_copy(a.action.kind)) copy_time += a.duration();
  EXPECT_LT(with.makespan - without.makespan, 0.5 * copy_time);
  EXPECT_GE(with.makespan, without.makespan);
}

}  // namespace
}  // namespace pf::sched
