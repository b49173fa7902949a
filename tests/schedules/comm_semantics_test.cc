// The validator's deadlock analysis under both communication semantics (comm_semantics.h).
#include "runtime/schedules/comm_semantics.h"

#include <gtest/gtest.h>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::from_lists;

const ValidationOptions kPosted{CommSemantics::kPosted};

// 1F1B, p = 2, m = 2, lowered with deferred receives as PyTorch's runtime orders them: rank 0 posts
// the RECV_B of micro-batch 0 before its next forward, rank 1 posts the RECV_F of micro-batch 1
// before its backward. Each rank's RECV comes before the SEND its peer is waiting at.
Schedule deferred_1f1b() {
  return from_lists({"0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0BW0 0RECV_B1 0BW1",
                     "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1SEND_B1"},
                    2, Placement::one_per_rank(2));
}

TEST(CommSemantics, NamesRoundTrip) {
  for (CommSemantics c : {CommSemantics::kRendezvous, CommSemantics::kPosted})
    EXPECT_EQ(parse_comm_semantics(comm_semantics_name(c)), c);
  EXPECT_HAS(testing::error_of([] { parse_comm_semantics("eager"); }), "unknown communication semantics 'eager'");
}

TEST(CommSemantics, PartnersAndDeliveringRecvs) {
  EXPECT_EQ(message_partner(parse_action("0SEND_F3")), parse_action("1RECV_F3"));
  EXPECT_EQ(message_partner(parse_action("1RECV_F3")), parse_action("0SEND_F3"));
  EXPECT_EQ(message_partner(parse_action("2SEND_B1")), parse_action("1RECV_B1"));
  EXPECT_EQ(delivering_recv(parse_action("2F1")), parse_action("2RECV_F1"));
  EXPECT_EQ(delivering_recv(parse_action("2B1")), parse_action("2RECV_B1"));
  EXPECT_EQ(delivering_recv(parse_action("2BW1")), parse_action("2RECV_B1"));
  EXPECT_FALSE(delivering_recv(parse_action("2W1")).has_value());
  EXPECT_FALSE(delivering_recv(parse_action("2SEND_F1")).has_value());
}

TEST(CommSemantics, DeferredReceivesDeadlockUnderRendezvousOnly) {
  const ValidationReport rendezvous = validate(deferred_1f1b());
  ASSERT_FALSE(rendezvous.ok());
  EXPECT_EQ(rendezvous.errors[0].to_string(),
            "rank 0, action 2 (0RECV_B0): deadlock (rank 0 -> rank 1 -> rank 0, blocking send/recv): waits for "
            "rank 1 to post 1SEND_B0 (its action 4), but rank 1 is blocked at action 2 (1RECV_F1)");
  const ValidationReport posted = validate(deferred_1f1b(), kPosted);
  EXPECT_TRUE(posted.ok()) << posted.to_string();
  EXPECT_TRUE(posted.lowered);
  EXPECT_EQ(posted.comm, CommSemantics::kPosted);
  EXPECT_EQ(posted.to_string(), "ok (lowered; deadlock-free with posted send/recv)\n");
  EXPECT_THROW(validate_or_throw(deferred_1f1b()), Error);
  EXPECT_NO_THROW(validate_or_throw(deferred_1f1b(), kPosted));
}

TEST(CommSemantics, PostedDeadlockNamesTheCycleAndTheSends) {
  // Each rank sends only after a backward that needs the other's SEND: no buffering helps.
  const Schedule s = from_lists({"0F0 0RECV_B0 0BW0 0SEND_F0", "1RECV_F0 1F0 1BW0 1SEND_B0"}, 1,
                                Placement::one_per_rank(2));
  const ValidationReport r = validate(s, kPosted);
  ASSERT_EQ(r.errors.size(), 2u) << r.to_string();
  EXPECT_EQ(r.errors[0].to_string(),
            "rank 0, action 2 (0BW0): deadlock (rank 0 -> rank 1 -> rank 0, posted send/recv): waits for the "
            "data of 1SEND_B0 (rank 1, action 3), but rank 1 is blocked at action 1 (1F0)");
  EXPECT_EQ(r.errors[1].to_string(),
            "rank 1, action 1 (1F0): deadlock: waits for the data of 0SEND_F0 (rank 0, action 3), but rank 0 is "
            "blocked at action 2 (0BW0)");
  EXPECT_HAS(r.grid, "[0BW0]");
}

TEST(CommSemantics, PostedStillNeedsTheRecvBeforeItsConsumer) {
  const Schedule s = from_lists({"0F0 0SEND_F0 0RECV_B0 0BW0", "1F0 1RECV_F0 1BW0 1SEND_B0"}, 1,
                                Placement::one_per_rank(2));
  const ValidationReport r = validate(s, kPosted);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.errors[0].to_string(),
            "rank 1, action 0 (1F0): runs before its activation arrives: 1RECV_F0 is at rank 1, action 1");
}

TEST(CommSemantics, WhatIsDeadlockFreeUnderRendezvousIsUnderPosted) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-v", "interleaved-1f1b"}) {
    GeneratorOptions o{4, 8};
    if (std::string(name) == "interleaved-1f1b") o.chunks = 2;
    const Schedule lowered = lower_communication(generate_schedule(name, o));
    EXPECT_TRUE(validate(lowered).ok()) << name;
    const ValidationReport posted = validate(lowered, kPosted);
    EXPECT_TRUE(posted.ok()) << name << ": " << posted.to_string();
  }
}

TEST(CommSemantics, UnloweredSchedulesCheckTheSameUnderBoth) {
  // A compute-dependency cycle: no communication semantics can save it.
  const Schedule s = from_lists({"0F0 0BW0 0F1 0BW1", "1F1 1BW1 1F0 1BW0"}, 2, Placement::one_per_rank(2));
  const ValidationReport a = validate(s), b = validate(s, kPosted);
  ASSERT_FALSE(a.ok());
  ASSERT_EQ(a.errors.size(), b.errors.size());
  for (size_t i = 0; i < a.errors.size(); ++i) EXPECT_EQ(a.errors[i].to_string(), b.errors[i].to_string());
  EXPECT_HAS(a.errors[0].message, "compute dependencies");
}

}  // namespace
}  // namespace pf::sched
