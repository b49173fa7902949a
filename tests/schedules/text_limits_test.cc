// Schedule text from untrusted files: tiny inputs naming huge ranks, stages or micro-batches are
// refused with the line and the limit before anything of that size is allocated, and what parses
// also prints and parses back.

#include <gtest/gtest.h>

#include "runtime/core/limits.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "tests/schedules/schedule_test_util.h"
#include "tests/util/address_space_cap.h"

namespace pf::sched {
namespace {

using testing::error_of;

// Runs `fn` with this process's address space capped at 4 GiB: an allocation of gigabytes fails
// (and the test with it) instead of succeeding silently.
template <typename Fn>
std::string error_with_memory_cap(Fn fn) {
  const pftest::AddressSpaceCap cap(int64_t{4} << 30);
  return error_of(fn);
}

TEST(TextLimits, HugeNumbersInTinyFilesAreRefusedWithTheLineAndLimit) {
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("rank 99999999: 0F0\n"); }),
             "line 1: rank 99999999 is beyond the limit of 4096 ranks");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("stages: 999999999\nrank 0: 0F0\n"); }),
             "line 1: stages 999999999 is more than the limit of 16384");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("ranks: 99999\n"); }),
             "line 1: ranks 99999 is more than the limit of 4096");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("microbatches: 100000000\nrank 0: 0F0\n"); }),
             "more than the limit of 65536");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("rank 0: 999999999F0\n"); }),
             "line 1, token '999999999F0': stage or micro-batch beyond the limits");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("rank 0: 0F999999999\n"); }),
             "token '0F999999999'");
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("placement: custom 0 99999999\nrank 0: 0F0\n"); }),
             "token '99999999': beyond the limits");
  // Within each limit, but stages x micro-batches is not.
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("stages: 16384\nmicrobatches: 65536\nrank 0: 0F0\n"); }),
             "stages x micro-batches = 16384 x 65536 is more than the limit of 262144");
  // v-shape doubles the stages of 4096 ranks past nothing, but 4096 ranks x 2 x 65536 micro-batches does.
  EXPECT_HAS(error_with_memory_cap([] { parse_schedule("ranks: 4096\nplacement: v-shape\nmicrobatches: 65536\n"); }),
             "is more than the limit of");
}

TEST(TextLimits, GeneratorRequestsPastTheLimitsAreRefused) {
  ScheduleRequest r;
  r.name = "interleaved-1f1b";
  r.ranks = 4;
  r.micro_batches = 8;
  r.chunks = 1 << 30;
  EXPECT_HAS(error_with_memory_cap([&] { make_schedule(r); }), "chunks must be in [1, 16384]");
  r.chunks = 2;
  r.ranks = 100000;
  EXPECT_HAS(error_with_memory_cap([&] { make_schedule(r); }), "ranks must be in [1, 4096]");
  r.name = "zb-auto";
  r.chunks = 1;
  r.ranks = 4;
  r.micro_batches = 1 << 20;
  EXPECT_HAS(error_with_memory_cap([&] { make_schedule(r); }), "micro-batches must be in [1, 65536]");
}

TEST(TextLimits, ControlCharactersInTheNameAreRefusedSoEveryParsedScheduleRoundTrips) {
  EXPECT_HAS(error_of([] { parse_schedule("name: a\rb\nrank 0: 0F0 0B0 0W0\n"); }),
             "line 1: the name contains a control character");
  EXPECT_HAS(error_of([] { parse_schedule("name: tab\there\nrank 0: 0F0 0B0 0W0\n"); }), "control character");
  const Schedule s = parse_schedule("name:   spaced name  \nrank 0: 0F0 0B0 0W0\n");
  EXPECT_EQ(parse_schedule(schedule_to_text(s)), s);
}

TEST(TextLimits, OversizedTextIsRefusedBeforeParsing) {
  const std::string big(limits::kMaxScheduleTextBytes + 1, '#');
  EXPECT_HAS(error_of([&] { parse_schedule(big); }), "more than the limit of 67108864");
}

}  // namespace
}  // namespace pf::sched
