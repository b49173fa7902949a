#include "runtime/schedules/ir.h"

#include <gtest/gtest.h>

#include <sstream>

#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;

TEST(ActionKind, NamesAndClasses) {
  const char* names[] = {"F",      "B",       "W",      "BW",        "SEND_F", "RECV_F",   "SEND_B",
                         "RECV_B", "OFFLOAD", "RELOAD", "RECOMPUTE", "STEP",   "ALLREDUCE", "HOLD", "RETURN", "UPDATE", "HEAD"};
  static_assert(sizeof(names) / sizeof(names[0]) == kNumActionKinds, "one name per kind");
  for (int k = 0; k < kNumActionKinds; ++k) {
    EXPECT_STREQ(action_kind_name(static_cast<ActionKind>(k)), names[k]);
  }
  EXPECT_TRUE(is_compute(ActionKind::kForward));
  EXPECT_TRUE(is_compute(ActionKind::kBackwardInput));
  EXPECT_TRUE(is_compute(ActionKind::kBackwardWeight));
  EXPECT_TRUE(is_compute(ActionKind::kBackward));
  EXPECT_TRUE(is_compute(ActionKind::kRecompute));
  EXPECT_FALSE(is_compute(ActionKind::kSendF));
  EXPECT_FALSE(is_compute(ActionKind::kStep));
  EXPECT_FALSE(is_compute(ActionKind::kOffload));
  for (ActionKind k : {ActionKind::kSendF, ActionKind::kRecvF, ActionKind::kSendB, ActionKind::kRecvB}) {
    EXPECT_TRUE(is_communication(k));
    EXPECT_FALSE(is_compute(k));
  }
  EXPECT_FALSE(is_communication(ActionKind::kForward));
  EXPECT_FALSE(is_communication(ActionKind::kAllReduce));
  EXPECT_FALSE(uses_micro_batch(ActionKind::kStep));
  EXPECT_FALSE(uses_micro_batch(ActionKind::kAllReduce));
  EXPECT_TRUE(uses_micro_batch(ActionKind::kReload));
}

TEST(Action, ExamplesFromTheHeader) {
  EXPECT_EQ(parse_action("2F0"), (Action{ActionKind::kForward, 2, 0}));
  EXPECT_EQ(parse_action("1B3"), (Action{ActionKind::kBackwardInput, 1, 3}));
  EXPECT_EQ(parse_action("0W5"), (Action{ActionKind::kBackwardWeight, 0, 5}));
  EXPECT_EQ(parse_action("1SEND_F2"), (Action{ActionKind::kSendF, 1, 2}));
  EXPECT_EQ(parse_action("3BW1"), (Action{ActionKind::kBackward, 3, 1}));
  EXPECT_EQ(parse_action("2STEP"), (Action{ActionKind::kStep, 2, -1}));
  EXPECT_EQ(parse_action("0ALLREDUCE"), (Action{ActionKind::kAllReduce, 0, -1}));
  EXPECT_EQ(parse_action("12RECOMPUTE345"), (Action{ActionKind::kRecompute, 12, 345}));
  EXPECT_EQ(action_to_string(Action{ActionKind::kRecvB, 7, 31}), "7RECV_B31");
  EXPECT_EQ(action_to_string(Action{ActionKind::kStep, 2, -1}), "2STEP");
  std::ostringstream out;
  out << Action{ActionKind::kBackward, 3, 1};
  EXPECT_EQ(out.str(), "3BW1");
}

TEST(Action, EveryKindRoundTrips) {
  for (int k = 0; k < kNumActionKinds; ++k) {
    const ActionKind kind = static_cast<ActionKind>(k);
    for (int stage : {0, 1, 9, 10, 123}) {
      for (int mb : {0, 1, 10, 99999}) {
        Action a{kind, stage, uses_micro_batch(kind) ? mb : -1};
        const std::string text = action_to_string(a);
        EXPECT_EQ(parse_action(text), a) << text;
        EXPECT_EQ(action_to_string(parse_action(text)), text);
      }
    }
  }
}

TEST(Action, ParseErrorsNameTheText) {
  EXPECT_HAS(error_of([] { parse_action(""); }), "must start with the stage number");
  EXPECT_HAS(error_of([] { parse_action("F0"); }), "invalid action 'F0'");
  EXPECT_HAS(error_of([] { parse_action("2X0"); }), "unknown kind 'X'");
  EXPECT_HAS(error_of([] { parse_action("2I0"); }), "unknown kind 'I'");
  EXPECT_HAS(error_of([] { parse_action("2F"); }), "F needs a micro-batch number");
  EXPECT_HAS(error_of([] { parse_action("2STEP3"); }), "takes no micro-batch number");
  EXPECT_HAS(error_of([] { parse_action("2F0x"); }), "unexpected 'x' after 2F0");
  EXPECT_HAS(error_of([] { parse_action("2f0"); }), "no action kind");
  EXPECT_HAS(error_of([] { parse_action(" 2F0"); }), "invalid action ' 2F0'");
  EXPECT_HAS(error_of([] { parse_action("2F-1"); }), "invalid action '2F-1'");
  EXPECT_HAS(error_of([] { parse_action("2F12345678901"); }), "too large");
  // Every error is kInvalidArgument.
  try {
    parse_action("zz");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST(Action, MalformedActionsStillPrint) {
  EXPECT_EQ(action_to_string(Action{ActionKind::kForward, 0, -1}), "0F-1");
  EXPECT_EQ(action_to_string(Action{ActionKind::kStep, 1, 4}), "1STEP4");
  EXPECT_EQ(action_to_string(Action{static_cast<ActionKind>(42), 1, 4}), "1?KIND42?4");
}

TEST(Placement, Helpers) {
  const Placement one = Placement::one_per_rank(3);
  EXPECT_EQ(one.kind, Placement::Kind::kOnePerRank);
  EXPECT_EQ(one.stage_to_rank, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(one.stages_of(1), (std::vector<int>{1}));

  const Placement looped = Placement::looped(3, 2);
  EXPECT_EQ(looped.stage_to_rank, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(looped.stages_of(2), (std::vector<int>{2, 5}));
  EXPECT_EQ(looped.rank_of(4), 1);

  const Placement v = Placement::v_shape(3);
  EXPECT_EQ(v.stage_to_rank, (std::vector<int>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(v.stages_of(0), (std::vector<int>{0, 5}));
  EXPECT_EQ(v.num_stages(), 6);

  const Placement c = Placement::custom(2, {1, 0, 0});
  EXPECT_EQ(c.kind, Placement::Kind::kCustom);
  EXPECT_EQ(c.stages_of(0), (std::vector<int>{1, 2}));
  EXPECT_HAS(error_of([] { Placement::custom(2, {0, 2}); }), "stage 1 is placed on rank 2, outside [0, 2)");
  EXPECT_HAS(error_of([] { Placement::looped(2, 0); }), "at least one chunk");
  EXPECT_HAS(error_of([] { Placement::one_per_rank(0); }), "at least one rank");
}

TEST(Placement, ClassifyAndMatch) {
  EXPECT_EQ(classify_placement(4, {0, 1, 2, 3}), Placement::Kind::kOnePerRank);
  EXPECT_EQ(classify_placement(2, {0, 1, 0, 1}), Placement::Kind::kLooped);
  EXPECT_EQ(classify_placement(2, {0, 1, 1, 0}), Placement::Kind::kVShape);
  EXPECT_EQ(classify_placement(2, {1, 0}), Placement::Kind::kCustom);
  EXPECT_EQ(classify_placement(1, {0, 0}), Placement::Kind::kLooped);  // = v-shape for one rank
  EXPECT_TRUE(placement_matches_kind(Placement::v_shape(1)));
  Placement bad = Placement::looped(2, 2);
  bad.stage_to_rank = {0, 1, 1, 0};
  EXPECT_FALSE(placement_matches_kind(bad));
  EXPECT_TRUE(placement_matches_kind(Placement::custom(2, {1, 1})));
  EXPECT_NE(Placement::looped(2, 1), Placement::one_per_rank(2));  // kinds differ
  EXPECT_EQ(Placement::looped(2, 1).stage_to_rank, Placement::one_per_rank(2).stage_to_rank);
}

}  // namespace
}  // namespace pf::sched
