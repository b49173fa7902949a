#include "runtime/schedules/lowering.h"

#include <gtest/gtest.h>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;
using testing::rank_text;

Schedule without_communication(const Schedule& s) {
  Schedule out = s;
  for (auto& list : out.ranks) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [](const Action& a) { return is_communication(a.kind); }),
               list.end());
  }
  return out;
}

int count(const Schedule& s, ActionKind kind) {
  int n = 0;
  for (const auto& list : s.ranks) {
    for (const Action& a : list) n += a.kind == kind;
  }
  return n;
}

TEST(Lowering, OneFOneBTwoRanks) {
  const Schedule s = lower_communication(generate_schedule("1f1b", {2, 3}));
  EXPECT_TRUE(is_lowered(s));
  EXPECT_EQ(rank_text(s, 0),
            "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0F2 0SEND_F2 0RECV_B1 0BW1 0RECV_B2 0BW2 0STEP");
  EXPECT_EQ(rank_text(s, 1),
            "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1RECV_F2 1SEND_B1 1F2 1BW2 1SEND_B2 1STEP");
  EXPECT_TRUE(validate(s).ok()) << validate(s).to_string();
}

TEST(Lowering, KeepsComputeOrderAndPairsEveryTransfer) {
  for (const std::string name : {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v"}) {
    const int v = name == "interleaved-1f1b" || name == "bfs" ? 2 : 1;
    const int p = 4, m = 6;
    const Schedule s = generate_schedule(name, {p, m, v});
    const Schedule low = lower_communication(s);
    EXPECT_EQ(without_communication(low), s) << name;
    // One transfer per adjacent pair of stages on different ranks, per micro-batch and direction.
    int cross = 0;
    for (int st = 0; st + 1 < s.num_stages(); ++st) {
      cross += s.placement.rank_of(st) != s.placement.rank_of(st + 1);
    }
    EXPECT_EQ(cross, name == "zb-v" ? 2 * p - 2 : p * v - 1) << name;
    for (ActionKind k : {ActionKind::kSendF, ActionKind::kRecvF, ActionKind::kSendB, ActionKind::kRecvB}) {
      EXPECT_EQ(count(low, k), cross * m) << name << " " << action_kind_name(k);
    }
    // Each SEND follows its producer with nothing but other transfers in between.
    const ActionIndex index(low);
    for (int r = 0; r < low.num_ranks(); ++r) {
      const auto& list = low.ranks[static_cast<size_t>(r)];
      for (size_t i = 0; i < list.size(); ++i) {
        const Action& a = list[i];
        if (a.kind != ActionKind::kSendF && a.kind != ActionKind::kSendB) continue;
        size_t j = i;
        while (j > 0 && is_communication(list[j - 1].kind)) --j;
        ASSERT_GT(j, 0u);
        const Action& producer = list[j - 1];
        EXPECT_EQ(producer.stage, a.stage) << name << " " << a;
        EXPECT_EQ(producer.micro_batch, a.micro_batch) << name << " " << a;
      }
    }
  }
}

TEST(Lowering, LocalHandOverNeedsNoTransfer) {
  // One rank holding every stage: nothing to send.
  const Schedule one = generate_schedule("interleaved-1f1b", {1, 4, 3});
  EXPECT_EQ(lower_communication(one), one);
  EXPECT_FALSE(is_lowered(lower_communication(one)));
  // V placement: stages p-1 and p share the last rank.
  const Schedule v = lower_communication(generate_schedule("zb-v", {3, 4}));
  for (const auto& list : v.ranks) {
    for (const Action& a : list) {
      EXPECT_FALSE(a.kind == ActionKind::kSendF && a.stage == 2) << a;
      EXPECT_FALSE(a.kind == ActionKind::kSendB && a.stage == 3) << a;
    }
  }
}

TEST(Lowering, IdempotentAndRefusesBrokenLoweredInput) {
  const Schedule low = lower_communication(generate_schedule("zb-h2", {4, 8}));
  EXPECT_EQ(lower_communication(low), low);
  Schedule partial = low;
  // Drop one SEND: the schedule is neither unlowered nor a valid lowered schedule.
  auto& list = partial.ranks[0];
  list.erase(std::find(list.begin(), list.end(), Action{ActionKind::kSendF, 0, 3}));
  const std::string msg = error_of([&] { lower_communication(partial); });
  EXPECT_HAS(msg, "already has SEND/RECV actions but is not a valid lowered schedule");
  EXPECT_HAS(msg, "1RECV_F3): has no matching 0SEND_F3 on rank 0");
}

TEST(Lowering, RejectsInvalidSchedules) {
  Schedule s = generate_schedule("1f1b", {2, 2});
  std::swap(s.ranks[1][0], s.ranks[1][1]);  // 1BW0 before 1F0
  const std::string msg = error_of([&] { lower_communication(s); });
  EXPECT_HAS(msg, "invalid schedule '1f1b'");
  EXPECT_HAS(msg, "rank 1, action 0 (1BW0): runs before its forward 1F0 (rank 1, action 1)");
}

// Why the placement matters: the obvious lowering (SEND right after the producer, RECV right
// before the consumer) deadlocks 1F1B under blocking send/recv, and the validator says where.
TEST(Lowering, NaivePlacementDeadlocksAndIsCaught) {
  const Schedule s = testing::from_lists(
      {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1",
       "1RECV_F0 1F0 1BW0 1SEND_B0 1RECV_F1 1F1 1BW1 1SEND_B1"},
      2, Placement::one_per_rank(2));
  const ValidationReport report = validate(s);
  ASSERT_FALSE(report.ok());
  EXPECT_HAS(report.errors[0].to_string(),
             "rank 0, action 3 (0SEND_F1): deadlock (rank 0 -> rank 1 -> rank 0, blocking send/recv): "
             "waits for rank 1 to post 1RECV_F1 (its action 4), but rank 1 is blocked at action 3 (1SEND_B0)");
  EXPECT_HAS(report.grid, "[0SEND_F1]");
  EXPECT_HAS(report.grid, "[1SEND_B0]");
  // The lowering pass orders the same transfers so that they meet.
  EXPECT_TRUE(validate(lower_communication(without_communication(s))).ok());
}

}  // namespace
}  // namespace pf::sched
