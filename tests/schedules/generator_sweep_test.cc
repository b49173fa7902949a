// Every built-in generator, p in 1..8, m in 1..32 (bitpipe: the even ones; under a sanitizer m in
// 1..12, 16, 24, 32), every valid v: the schedule validates before and after lowering, lowering
// keeps the compute order and is idempotent, the text form round-trips, and every stage's weight
// gradients run in micro-batch order.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"
#include "tests/util/sanitizer.h"

namespace pf::sched {
namespace {

class Sweep : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

std::vector<int> chunk_choices(const std::string& name) {
  if (takes_any_chunks(name)) return {1, 2, 3, 4};
  if (name == "zb-v" || name == "dualpipe-v" || name == "v-half" || name == "v-min" || name == "bitpipe")
    return {1, 2};  // 1 means 2
  return {1};
}

TEST_P(Sweep, ValidBeforeAndAfterLowering) {
  const std::string name = std::get<0>(GetParam());
  const int p = std::get<1>(GetParam());
  for (int m = 1; m <= 32; ++m) {
    if (name == "bitpipe" && m % 2 != 0) continue;  // half the micro-batches go each way
    if (pf::testing::kUnderSanitizer && m > 12 && m % 8 != 0) continue;
    for (int v : chunk_choices(name)) {
      SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v));
      const Schedule s = generate_schedule(name, {p, m, v});
      ASSERT_EQ(s.name, name);
      ASSERT_EQ(s.num_ranks(), p);
      ASSERT_EQ(s.num_micro_batches, m);
      const ValidationReport before = validate(s);
      ASSERT_TRUE(before.ok()) << before.to_string();
      EXPECT_FALSE(before.lowered);
      EXPECT_TRUE(before.notes.empty()) << before.to_string();
      const Schedule low = lower_communication(s);
      const ValidationReport after = validate(low);
      ASSERT_TRUE(after.ok()) << after.to_string();
      EXPECT_EQ(after.lowered, p > 1);
      EXPECT_EQ(lower_communication(low), low);
      // Compute order unchanged.
      for (int r = 0; r < p; ++r) {
        std::vector<Action> compute;
        for (const Action& a : low.ranks[static_cast<size_t>(r)]) {
          if (!is_communication(a.kind)) compute.push_back(a);
        }
        ASSERT_EQ(compute, s.ranks[static_cast<size_t>(r)]) << "rank " << r;
      }
      const std::string text = schedule_to_text(low);
      ASSERT_EQ(parse_schedule(text), low);
      ASSERT_EQ(parse_schedule(schedule_to_text(s)), s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllGenerators, Sweep,
                         ::testing::Combine(::testing::Values("gpipe", "1f1b", "interleaved-1f1b", "bfs",
                                                              "zb-h1", "zb-h2", "zb-v", "interleaved-zb",
                                                              "dualpipe-v", "v-half", "v-min", "bitpipe"),
                                            ::testing::Range(1, 9)),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param);
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n + "_p" + std::to_string(std::get<1>(info.param));
                         });

TEST(Sweep, ReverseBackwardBfsIsValidToo) {
  for (int p = 1; p <= 8; ++p) {
    for (int m : {1, 3, 8, 13}) {
      for (int v = 1; v <= 4; ++v) {
        GeneratorOptions o{p, m, v};
        o.reverse_backward = true;
        const Schedule s = generate_schedule("bfs", o);
        ASSERT_TRUE(validate(lower_communication(s)).ok());
      }
    }
  }
}

}  // namespace
}  // namespace pf::sched
