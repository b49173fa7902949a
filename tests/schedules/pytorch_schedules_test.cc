// interleaved-zb and dualpipe-v, the two PyTorch schedule classes added after the first eight:
// their orders against references written out here from PyTorch's algorithms, and their unit-cost
// makespans against PyTorch's and zb-v's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/pytorch_format.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::rank_text;

// The compute actions of one rank (STEPs dropped).
std::string compute_text(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::kStep) continue;
    if (!out.empty()) out += ' ';
    out += action_to_string(a);
  }
  return out;
}

double unit_makespan(const Schedule& s) { return simulate(s, CostModel::uniform(s.num_stages())).makespan; }

TEST(InterleavedZeroBubble, OneChunkIsZbH1) {
  for (int p = 1; p <= 8; ++p) {
    for (int m = 1; m <= 24; ++m) {
      const Schedule a = generate_schedule("interleaved-zb", {p, m, 1});
      const Schedule b = generate_schedule("zb-h1", {p, m, 1});
      ASSERT_EQ(a.placement.stage_to_rank, b.placement.stage_to_rank);
      ASSERT_EQ(a.ranks, b.ranks) << "p=" << p << " m=" << m;
    }
  }
}

// p = 2, m = 4, v = 2 (groups of 2), worked out by hand from PyTorch's
// ScheduleInterleavedZeroBubble: rank s warms up (v-1)*2 + (p-1-s) forwards, then (F, B) pairs, a W
// after each B from its s-th (0-based) on, the remaining W's at the end.
TEST(InterleavedZeroBubble, ReferenceOrder) {
  const Schedule s = generate_schedule("interleaved-zb", {2, 4, 2});
  EXPECT_EQ(s.placement, Placement::looped(2, 2));
  EXPECT_EQ(compute_text(s, 0),
            "0F0 0F1 2F0 2F1 2B0 2W0 0F2 2B1 2W1 0F3 0B0 0W0 2F2 0B1 0W1 2F3 2B2 2W2 2B3 2W3 0B2 0W2 0B3 0W3");
  EXPECT_EQ(compute_text(s, 1),
            "1F0 1F1 3F0 3B0 3F1 3B1 3W0 1F2 1B0 3W1 1F3 1B1 1W0 3F2 3B2 1W1 3F3 3B3 3W2 1B2 3W3 1B3 1W2 1W3");
}

// PyTorch's unit-cost makespans (p = 4): interleaved zero bubble 19 (m = 2) and 27 (m = 4) where
// ZB-V takes 22 and 30.
TEST(InterleavedZeroBubble, ShorterThanZbVForSmallM) {
  EXPECT_DOUBLE_EQ(unit_makespan(generate_schedule("zb-v", {4, 2, 2})), 22);
  EXPECT_DOUBLE_EQ(unit_makespan(generate_schedule("zb-v", {4, 4, 2})), 30);
  EXPECT_LE(unit_makespan(generate_schedule("interleaved-zb", {4, 2, 2})), 19);
  EXPECT_LE(unit_makespan(generate_schedule("interleaved-zb", {4, 4, 2})), 27);
}

TEST(InterleavedZeroBubble, NeverSlowerThanInterleaved1F1B) {
  for (int p = 2; p <= 6; ++p) {
    for (int v = 1; v <= 3; ++v) {
      for (int m : {p, 2 * p, 3 * p}) {
        const double zb = unit_makespan(generate_schedule("interleaved-zb", {p, m, v}));
        const double base = unit_makespan(generate_schedule("interleaved-1f1b", {p, m, v}));
        EXPECT_LE(zb, base) << "p=" << p << " m=" << m << " v=" << v;
      }
    }
  }
}

// p = 2, m = 4 worked out by hand from PyTorch's ScheduleDualPipeV (its eight steps; the pairs of
// step 4 and 5 are OVERLAP_F_B, an F marked '+' and its backward, except the last rank's first).
TEST(DualPipeV, ReferenceOrder) {
  const Schedule s = generate_schedule("dualpipe-v", {2, 4, 2});
  EXPECT_EQ(s.placement, Placement::v_shape(2));
  EXPECT_EQ(compute_text(s, 0),
            "0F0 0F1 0F2 3F0 3B0 3W0 3F1 0F3+ 3BW1 3F2+ 0BW0 3BW2 3F3+ 0BW1 3BW3 0B2 0W2 0B3 0W3");
  EXPECT_EQ(compute_text(s, 1), "1F0 2F0 1F1 2F1 1F2 2BW0 2F2+ 1BW0 1F3+ 2BW1 2F3+ 1BW1 2BW2 1BW2 2B3 1B3 2W3 1W3");
}

// The compound actions survive lowering, the text form and PyTorch's CSV, where each is one
// `(F;B)OVERLAP_F_B` cell.
TEST(DualPipeV, OverlapsRoundTrip) {
  const Schedule s = lower_communication(generate_schedule("dualpipe-v", {4, 8, 2}));
  ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
  int overlaps = 0;
  for (const auto& list : s.ranks)
    for (const Action& a : list) overlaps += a.overlaps_next;
  // Steps 4 and 5: 2(n-2p+s+1) + (p-s-1) per rank, less the last rank's first pair.
  EXPECT_EQ(overlaps, 2 * (1 + 2 + 3 + 4) + (3 + 2 + 1 + 0) - 1);
  EXPECT_EQ(parse_schedule(schedule_to_text(s)), s);
  const std::string csv = schedule_to_pytorch_csv(s, /*with_comms=*/false);
  int cells = 0;
  for (size_t at = csv.find(")OVERLAP_F_B"); at != std::string::npos; at = csv.find(")OVERLAP_F_B", at + 1)) ++cells;
  EXPECT_EQ(cells, overlaps) << csv;
  EXPECT_NE(csv.find("(0F7;7B3)OVERLAP_F_B"), std::string::npos) << csv;  // rank 0's first: F of chunk 0, BW of chunk 1
  const Schedule back = parse_pytorch_csv(csv).schedule;
  int back_overlaps = 0;
  for (const auto& list : back.ranks)
    for (const Action& a : list) back_overlaps += a.overlaps_next;
  EXPECT_EQ(back_overlaps, overlaps);
  // With the transfers: receives go before the compound cell, so the dump still validates.
  const Schedule comms = parse_pytorch_csv(schedule_to_pytorch_csv(s, /*with_comms=*/true)).schedule;
  EXPECT_TRUE(validate(comms, {CommSemantics::kPosted}).ok()) << validate(comms, {CommSemantics::kPosted}).to_string();
}

TEST(DualPipeV, ValidatorChecksTheOverlapPartner) {
  Schedule s = generate_schedule("dualpipe-v", {2, 4, 2});
  auto& list = s.ranks[0];
  for (Action& a : list)
    if (a.kind == ActionKind::kForward && a.micro_batch == 0) a.overlaps_next = true;  // 0F0's next is 0F1
  EXPECT_HAS(validate(s).to_string(), "which must be a B or BW, not 0F1");
  Schedule last = generate_schedule("dualpipe-v", {1, 2, 2});
  last.ranks[0].back().overlaps_next = false;
  for (auto it = last.ranks[0].rbegin(); it != last.ranks[0].rend(); ++it)
    if (it->kind == ActionKind::kForward) {
      it->overlaps_next = true;
      break;
    }
  // The last F of a one-rank schedule is followed by backwards: accepted.
  EXPECT_TRUE(validate(last).ok()) << validate(last).to_string();
  EXPECT_HAS(testing::error_of([] { parse_action("1BW0+"); }), "applies to an F only");
}

// PyTorch refuses m < 2p; here the order is built for 2p micro-batches and cut to m, which keeps it
// valid and never slower than the full order.
TEST(DualPipeV, SmallMIsTheFullOrderCut) {
  for (int p = 1; p <= 6; ++p) {
    const Schedule full = generate_schedule("dualpipe-v", {p, 2 * p, 2});
    for (int m = 1; m < 2 * p; ++m) {
      const Schedule cut = generate_schedule("dualpipe-v", {p, m, 2});
      for (int r = 0; r < p; ++r) {
        std::vector<Action> kept;
        const auto& all = full.ranks[static_cast<size_t>(r)];
        for (size_t i = 0; i < all.size(); ++i) {
          if (all[i].kind == ActionKind::kStep || all[i].micro_batch >= m) continue;
          kept.push_back(all[i]);
          if (all[i].overlaps_next && all[i + 1].micro_batch >= m) kept.back().overlaps_next = false;
        }
        std::vector<Action> got;
        for (const Action& a : cut.ranks[static_cast<size_t>(r)]) {
          if (a.kind != ActionKind::kStep) got.push_back(a);
        }
        ASSERT_EQ(got, kept) << "p=" << p << " m=" << m << " rank " << r;
      }
      EXPECT_LE(unit_makespan(cut), unit_makespan(full));
    }
  }
}

TEST(DualPipeV, ChunksAndReverseRefused) {
  EXPECT_HAS(testing::error_of([] { generate_schedule("dualpipe-v", {4, 8, 3}); }),
             "dualpipe-v always has 2 chunks per rank");
  GeneratorOptions o{4, 8, 2};
  o.reverse_backward = true;
  EXPECT_HAS(testing::error_of([&] { generate_schedule("dualpipe-v", o); }),
             "reverse_backward applies to bfs only, not to dualpipe-v");
}

}  // namespace
}  // namespace pf::sched
