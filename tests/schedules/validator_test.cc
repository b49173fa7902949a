#include "runtime/schedules/validator.h"

#include <gtest/gtest.h>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;
using testing::from_lists;

// zb-h1, p = 2, m = 2:
//   rank 0: 0F0 0F1 0B0 0W0 0B1 0W1 0STEP
//   rank 1: 1F0 1B0 1F1 1B1 1W0 1W1 1STEP
Schedule split(const std::string& r0 = "0F0 0F1 0B0 0W0 0B1 0W1 0STEP",
               const std::string& r1 = "1F0 1B0 1F1 1B1 1W0 1W1 1STEP") {
  return from_lists({r0, r1}, 2, Placement::one_per_rank(2));
}

// The first error, as text.
std::string first_error(const Schedule& s) {
  const ValidationReport report = validate(s);
  if (report.ok()) return "(valid)";
  return report.errors[0].to_string();
}

TEST(Validator, AcceptsGoodSchedules) {
  EXPECT_EQ(split().ranks, generate_schedule("zb-h1", {2, 2}).ranks);  // the fixture is zb-h1
  const ValidationReport report = validate(split());
  EXPECT_TRUE(report.ok()) << report.to_string();
  EXPECT_FALSE(report.lowered);
  EXPECT_EQ(report.to_string(), "ok\n");
  EXPECT_TRUE(report.grid.empty());
  const ValidationReport low = validate(lower_communication(split()));
  EXPECT_TRUE(low.ok());
  EXPECT_TRUE(low.lowered);
  EXPECT_EQ(low.to_string(), "ok (lowered)\n");
  EXPECT_NO_THROW(validate_or_throw(split()));
  // STEP and ALLREDUCE are optional.
  EXPECT_TRUE(validate(split("0F0 0F1 0B0 0W0 0B1 0W1", "1F0 1B0 1F1 1B1 1W0 1W1 1ALLREDUCE 1STEP")).ok());
}

TEST(Validator, MissingW) {
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0STEP")),
            "rank 0, action 4 (0B1): missing 0W1: the weight gradient of 0B1 never runs");
}

TEST(Validator, MissingForwardAndBackward) {
  EXPECT_EQ(first_error(split("0F0 0B0 0W0 0STEP")),
            "rank 0: missing 0F1: micro-batch 1 never runs forward on stage 0");
  EXPECT_HAS(validate(split("0F0 0B0 0W0 0STEP")).to_string(),
             "rank 0: missing the backward of micro-batch 1 on stage 0: neither 0B1 + 0W1 nor 0BW1");
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0W1 0STEP")),
            "rank 0, action 4 (0W1): missing 0B1: 0W1 has no input-gradient backward before it");
}

TEST(Validator, DuplicateF) {
  EXPECT_EQ(first_error(split("0F0 0F1 0F0 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 2 (0F0): duplicate: the same action already runs at rank 0, action 0");
}

TEST(Validator, BBeforeF) {
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0W1 0STEP", "1B0 1F0 1F1 1B1 1W0 1W1 1STEP")),
            "rank 1, action 0 (1B0): runs before its forward 1F0 (rank 1, action 1)");
}

TEST(Validator, WBeforeB) {
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0W1 0STEP", "1F0 1W0 1B0 1F1 1B1 1W1 1STEP")),
            "rank 1, action 1 (1W0): runs before its input-gradient backward 1B0 (rank 1, action 2)");
}

TEST(Validator, MixedFusedAndSplit) {
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0BW0 0B1 0W1 0STEP")),
            "rank 0, action 2 (0B0): mixes split 0B0 with fused 0BW0 (rank 0, action 3); use one form");
}

TEST(Validator, ActionOnTheWrongRank) {
  EXPECT_EQ(first_error(split("0F0 0F1 1F1 0B0 0W0 0B1 0W1 0STEP", "1F0 1B0 1B1 1W0 1W1 1STEP")),
            "rank 0, action 2 (1F1): stage 1 is placed on rank 1, not on rank 0");
}

TEST(Validator, StageAndMicroBatchOutOfRange) {
  EXPECT_EQ(first_error(split("0F0 0F1 5F0 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 2 (5F0): stage 5 is out of range (the schedule has 2 stages)");
  EXPECT_EQ(first_error(split("0F0 0F1 0F2 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 2 (0F2): micro-batch 2 is out of range (the schedule has 2 micro-batches)");
  Schedule s = split();
  s.ranks[0][6].micro_batch = 3;
  EXPECT_EQ(first_error(s), "rank 0, action 6 (0STEP3): STEP acts on the whole stage: its micro_batch must be -1, not 3");
  s = split();
  s.ranks[0][0].kind = static_cast<ActionKind>(99);
  EXPECT_EQ(first_error(s), "rank 0, action 0 (0?KIND99?0): unknown action kind 99");
}

TEST(Validator, ScheduleShape) {
  Schedule s = split();
  s.ranks.pop_back();
  EXPECT_EQ(first_error(s), "the schedule has 1 action lists but the placement has 2 ranks");
  s = split();
  s.num_micro_batches = 0;
  EXPECT_EQ(first_error(s), "num_micro_batches is 0; a schedule needs at least one");
  s = split();
  s.placement.stage_to_rank = {0, 2};
  EXPECT_EQ(first_error(s), "stage 1 is placed on rank 2, outside [0, 2)");
  s = split();
  s.placement.kind = Placement::Kind::kLooped;
  EXPECT_TRUE(validate(s).ok());  // looped with one chunk is the same map
  s.placement.kind = Placement::Kind::kVShape;
  EXPECT_EQ(first_error(s), "the placement says v-shape but its stage->rank map does not follow that formula");
}

TEST(Validator, StepBeforeTheLastW) {
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0STEP 0W1")),
            "rank 0, action 5 (0STEP): runs before the last weight gradient of stage 0 (0W1, rank 0, action 6)");
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0W1 0STEP 0ALLREDUCE")),
            "rank 0, action 7 (0ALLREDUCE): runs after the optimizer step 0STEP (rank 0, action 6)");
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0W0 0B1 0W1 0STEP 0STEP")),
            "rank 0, action 7 (0STEP): duplicate: the same action already runs at rank 0, action 6");
}

TEST(Validator, RecomputeOffloadReload) {
  EXPECT_TRUE(validate(split("0F0 0OFFLOAD0 0F1 0RELOAD0 0B0 0W0 0RECOMPUTE1 0B1 0W1 0STEP")).ok());
  EXPECT_EQ(first_error(split("0RECOMPUTE0 0F0 0F1 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 0 (0RECOMPUTE0): runs before 0F0 (rank 0, action 1)");
  EXPECT_EQ(first_error(split("0F0 0F1 0B0 0RECOMPUTE0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 3 (0RECOMPUTE0): runs after the backward 0B0 (rank 0, action 2) that needs it");
  EXPECT_EQ(first_error(split("0F0 0OFFLOAD0 0F1 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 1 (0OFFLOAD0): offloads activations that are never reloaded (no 0RELOAD0)");
  EXPECT_EQ(first_error(split("0F0 0F1 0RELOAD0 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 2 (0RELOAD0): reloads activations that were never offloaded (no 0OFFLOAD0)");
  EXPECT_EQ(first_error(split("0F0 0RELOAD0 0OFFLOAD0 0F1 0B0 0W0 0B1 0W1 0STEP")),
            "rank 0, action 1 (0RELOAD0): runs before 0OFFLOAD0 (rank 0, action 2)");
}

// Lowered 1f1b, p = 2, m = 2:
//   rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0STEP
//   rank 1: 1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1SEND_B1 1STEP
Schedule lowered(const std::string& r0 = "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0STEP",
                 const std::string& r1 = "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1SEND_B1 1STEP") {
  return from_lists({r0, r1}, 2, Placement::one_per_rank(2));
}

TEST(Validator, LoweredPairs) {
  EXPECT_EQ(lowered().ranks, lower_communication(generate_schedule("1f1b", {2, 2})).ranks);
  EXPECT_TRUE(validate(lowered()).ok());
  // RECV without SEND.
  EXPECT_EQ(first_error(lowered("0F0 0SEND_F0 0F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0STEP")),
            "rank 1, action 2 (1RECV_F1): has no matching 0SEND_F1 on rank 0");
  // SEND without RECV.
  EXPECT_EQ(first_error(lowered("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0BW1 0STEP")),
            "rank 1, action 7 (1SEND_B1): has no matching 0RECV_B1 on rank 0");
  // Neither: the consumer has no way to get its input.
  EXPECT_EQ(first_error(lowered("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0BW1 0STEP",
                                "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1STEP")),
            "rank 0, action 6 (0BW1): needs the gradient of 1BW1 from rank 1 but the lowered schedule has "
            "no 1SEND_B1 / 0RECV_B1 pair for it");
  // SEND before its producer; RECV after its consumer.
  EXPECT_EQ(first_error(lowered("0SEND_F0 0F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0STEP")),
            "rank 0, action 0 (0SEND_F0): sends the activation before 0F0 (rank 0, action 1) produces it");
  EXPECT_EQ(first_error(lowered("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0BW1 0RECV_B1 0STEP")),
            "rank 0, action 6 (0BW1): runs before its gradient arrives: 0RECV_B1 is at rank 0, action 7");
  // Transfers that do not exist.
  EXPECT_EQ(first_error(lowered("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0STEP 0SEND_B0")),
            "rank 0, action 9 (0SEND_B0): stage 0 has no previous stage to send gradients to");
  const Schedule local = from_lists({"0F0 0SEND_F0 1RECV_F0 1F0 1BW0 0BW0"}, 1, Placement::looped(1, 2));
  EXPECT_EQ(first_error(local),
            "rank 0, action 1 (0SEND_F0): stages 0 and 1 are both on rank 0: data between them is handed "
            "over locally, not sent or received");
}

TEST(Validator, DeadlockCycleOfTwoRecvs) {
  const Schedule s = lowered("0F0 0RECV_B0 0SEND_F0 0BW0 0F1 0SEND_F1 0RECV_B1 0BW1",
                             "1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1");
  const ValidationReport report = validate(s);
  ASSERT_EQ(report.errors.size(), 2u) << report.to_string();
  EXPECT_EQ(report.errors[0].to_string(),
            "rank 0, action 1 (0RECV_B0): deadlock (rank 0 -> rank 1 -> rank 0, blocking send/recv): waits "
            "for rank 1 to post 1SEND_B0 (its action 3), but rank 1 is blocked at action 0 (1RECV_F0)");
  EXPECT_EQ(report.errors[1].to_string(),
            "rank 1, action 0 (1RECV_F0): deadlock: waits for rank 0 to post 0SEND_F0 (its action 2), but "
            "rank 0 is blocked at action 1 (0RECV_B0)");
  EXPECT_EQ(report.grid,
            "slot     |          0          1          2          3          4          5          6          7\n"
            "> rank 0 |        0F0 [0RECV_B0]   0SEND_F0       0BW0        0F1   0SEND_F1   0RECV_B1       0BW1\n"
            "> rank 1 | [1RECV_F0]        1F0       1BW0   1SEND_B0   1RECV_F1        1F1       1BW1   1SEND_B1\n");
  const std::string msg = error_of([&] { validate_or_throw(s); });
  EXPECT_HAS(msg, "invalid schedule 'custom': 2 errors:\n  rank 0, action 1 (0RECV_B0): deadlock");
  EXPECT_HAS(msg, "> rank 1 | [1RECV_F0]");
}

TEST(Validator, DeadlockOfComputeDependencies) {
  // Unlowered: rank 0 waits for 1BW0, which comes after 1F1, which needs 0F1 (after 0BW0).
  const Schedule s = split("0F0 0BW0 0F1 0BW1", "1F0 1F1 1BW1 1BW0");
  EXPECT_EQ(first_error(s),
            "rank 0, action 1 (0BW0): deadlock (rank 0 -> rank 1 -> rank 0, compute dependencies): waits for "
            "1BW0 (rank 1, action 3), but rank 1 is blocked at action 1 (1F1)");
  // A V whose turn is in the wrong order on its rank waits for itself.
  const Schedule v = from_lists({"1F0 0F0 1BW0 0BW0"}, 1, Placement::looped(1, 2));
  EXPECT_EQ(first_error(v),
            "rank 0, action 0 (1F0): deadlock (rank 0 -> rank 0, compute dependencies): waits for 0F0 "
            "(rank 0, action 1), which comes later on this rank");
}

TEST(Validator, ManyErrorsAreCapped) {
  Schedule s = generate_schedule("gpipe", {2, 30});
  for (auto& list : s.ranks) std::reverse(list.begin(), list.end());
  const ValidationReport report = validate(s);
  EXPECT_EQ(static_cast<int>(report.errors.size()), ValidationReport::kMaxErrors);
  EXPECT_GT(report.more_errors, 0);
  EXPECT_HAS(report.to_string(), "... and " + std::to_string(report.more_errors) + " more\n");
}

TEST(Validator, WeightGradientOrder) {
  EXPECT_EQ(weight_gradient_order(split(), 1), (std::vector<int>{0, 1}));
  EXPECT_EQ(weight_gradient_order(split("0F0 0F1 0B0 0B1 0W1 0W0 0STEP"), 0), (std::vector<int>{1, 0}));
  const ValidationReport report = validate(split("0F0 0F1 0B0 0B1 0W1 0W0 0STEP"));
  EXPECT_TRUE(report.ok());
  ASSERT_EQ(report.notes.size(), 1u);
  EXPECT_EQ(report.notes[0],
            "stage 0 accumulates weight gradients out of micro-batch order (1 0); bitwise equality with "
            "the sequential reference needs 0 1");
  EXPECT_TRUE(weight_gradient_order(split(), 7).empty());
}

}  // namespace
}  // namespace pf::sched
