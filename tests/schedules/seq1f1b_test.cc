// seq1f1b (sequence-sliced 1F1B) and what Schedule::seq_slices adds to the IR passes: the slice
// order the validator and the simulator enforce, and the text form's seq_slices header.
#include <gtest/gtest.h>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "tests/schedules/schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;
using testing::from_lists;
using testing::peak_activations;
using testing::rank_text;
using testing::warmup_forwards;

Schedule sliced(int p, int m, int S) {
  GeneratorOptions o;
  o.ranks = p;
  o.micro_batches = m;
  o.seq_slices = S;
  return generate_schedule("seq1f1b", o);
}

TEST(Seq1F1B, OrderOfTheReference) {
  const Schedule s = sliced(2, 2, 2);
  EXPECT_EQ(s.seq_slices, 2);
  EXPECT_EQ(s.num_micro_batches, 4);  // units: micro-batches x slices
  EXPECT_EQ(rank_text(s, 0), "0F0 0F1 0F2 0BW1 0F3 0BW0 0BW3 0BW2 0STEP");
  EXPECT_EQ(rank_text(s, 1), "1F0 1F1 1BW1 1F2 1BW0 1F3 1BW3 1BW2 1STEP");
}

TEST(Seq1F1B, OneSliceIsOneFOneB) {
  for (int p : {1, 2, 4, 5})
    for (int m : {1, 3, 8}) {
      Schedule s = sliced(p, m, 1);
      const Schedule ref = generate_schedule("1f1b", {p, m});
      EXPECT_EQ(s.name, "seq1f1b");
      s.name = ref.name;
      EXPECT_EQ(s, ref) << "p " << p << " m " << m;
    }
}

TEST(Seq1F1B, WarmUpAndPeakUnits) {
  for (int p : {2, 4})
    for (int S : {2, 4})
      for (int m : {1, 2, 8}) {
        const Schedule s = sliced(p, m, S);
        ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
        const Schedule lowered = lower_communication(s);
        ASSERT_TRUE(validate(lowered).ok());
        EXPECT_EQ(lowered.seq_slices, S);
        for (int r = 0; r < p; ++r) {
          const int warm = std::min(p - r - 1 + S - 1, m * S);
          // warmup_forwards counts the first pair's F too.
          EXPECT_EQ(warmup_forwards(s, r), std::min(warm + 1, m * S)) << "p " << p << " S " << S << " m " << m
                                                                       << " rank " << r;
          EXPECT_EQ(peak_activations(s, r), std::min(warm + 1, m * S));
        }
        // The simulator's count agrees; rank 0 holds p + S - 1 units (m large enough), i.e.
        // (p + S - 1) / S micro-batches' worth, against 1f1b's p.
        const SimulationResult sim = simulate(s, CostModel::uniform(p));
        EXPECT_EQ(sim.peak_activations[0], std::min(p + S - 1, m * S));
      }
}

// Uniform costs of 1/S micro-batch per unit: the makespan is (m S + p - 1) units, so the bubble
// falls from 1f1b's (p-1)/(m+p-1) to (p-1)/(m S+p-1).
TEST(Seq1F1B, BubbleWithUniformUnitCosts) {
  for (int p : {2, 4})
    for (int S : {1, 2, 4}) {
      const int m = 8;
      const double unit = 1.0 / S;
      const SimulationResult sim = simulate(sliced(p, m, S), CostModel::uniform(p, unit, unit, unit));
      EXPECT_NEAR(sim.makespan, (m * S + p - 1) * 3 * unit, 1e-9) << "p " << p << " S " << S;
      EXPECT_NEAR(sim.bubble_rate, static_cast<double>(p - 1) / (m * S + p - 1), 1e-9) << "p " << p << " S " << S;
    }
}

TEST(Seq1F1B, OptionErrors) {
  GeneratorOptions o{4, 8};
  o.seq_slices = 2;
  EXPECT_HAS(error_of([&] { generate_schedule("1f1b", o); }),
             "1f1b does not slice sequences: seq_slices must be 1, got 2");
  o.seq_slices = 0;
  EXPECT_HAS(error_of([&] { generate_schedule("seq1f1b", o); }), "seq1f1b: seq_slices must be >= 1, got 0");
  o.seq_slices = 2;
  o.chunks = 2;
  EXPECT_HAS(error_of([&] { generate_schedule("seq1f1b", o); }), "chunks must be 1");
}

// Two ranks, one micro-batch of two slices, written by hand.
Schedule two_slices(const std::string& rank0, const std::string& rank1) {
  Schedule s = from_lists({rank0, rank1}, 2, Placement::one_per_rank(2));
  s.seq_slices = 2;
  return s;
}

TEST(Seq1F1BValidator, RefusesBackwardsInForwardSliceOrder) {
  const Schedule good = two_slices("0F0 0F1 0BW1 0BW0", "1F0 1F1 1BW1 1BW0");
  EXPECT_TRUE(validate(good).ok()) << validate(good).to_string();
  const Schedule bad = two_slices("0F0 0F1 0BW1 0BW0", "1F0 1F1 1BW0 1BW1");
  const ValidationReport report = validate(bad);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.errors[0].rank, 1);
  EXPECT_EQ(report.errors[0].action, "1BW0");
  EXPECT_HAS(report.errors[0].message, "runs before 1BW1");
  EXPECT_HAS(report.errors[0].message, "reverse slice order");
  // Without slicing the same lists are two independent micro-batches, and valid.
  Schedule plain = bad;
  plain.seq_slices = 1;
  EXPECT_TRUE(validate(plain).ok()) << validate(plain).to_string();
  // The simulator refuses it too: 1BW0 needs 1BW1, which rank 1 runs later.
  EXPECT_HAS(error_of([&] { simulate(bad, CostModel::uniform(2)); }), "needs 1BW1, which rank 1 runs later");
}

TEST(Seq1F1BValidator, RefusesForwardsOutOfSliceOrder) {
  const Schedule bad = two_slices("0F1 0F0 0BW1 0BW0", "1F0 1F1 1BW1 1BW0");
  const ValidationReport report = validate(bad);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.errors[0].action, "0F1");
  EXPECT_HAS(report.errors[0].message, "runs before 0F0");
  EXPECT_HAS(error_of([&] { simulate(bad, CostModel::uniform(2)); }), "needs 0F0, which rank 0 runs later");
}

TEST(Seq1F1BValidator, SlicesMustDivideTheUnits) {
  Schedule s = two_slices("0F0 0F1 0BW1 0BW0", "1F0 1F1 1BW1 1BW0");
  s.seq_slices = 3;
  const ValidationReport report = validate(s);
  ASSERT_FALSE(report.ok());
  EXPECT_HAS(report.errors[0].message, "seq_slices is 3; it must be >= 1 and divide num_micro_batches (2 units");
}

TEST(Seq1F1BText, RoundTripsWithASlicesLine) {
  const Schedule s = sliced(2, 2, 2);
  const std::string text = schedule_to_text(s);
  EXPECT_HAS(text, "microbatches: 4\nseq_slices: 2\nplacement: one-per-rank\n");
  EXPECT_EQ(parse_schedule(text), s);
  EXPECT_EQ(schedule_to_text(parse_schedule(text)), text);
  // Unsliced schedules print no such line.
  const std::string plain = schedule_to_text(generate_schedule("1f1b", {2, 2}));
  EXPECT_EQ(plain.find("seq_slices"), std::string::npos);
  EXPECT_EQ(parse_schedule(plain).seq_slices, 1);
  // Schedules differing only in seq_slices differ.
  Schedule other = s;
  other.seq_slices = 1;
  EXPECT_NE(other, s);
  EXPECT_HAS(error_of([&] { parse_schedule("seq_slices: 0\nrank 0: 0F0 0BW0\n"); }), "seq_slices");
}

// Slices' backwards in reverse are the sliced reference's order: no out-of-order note, while a
// stage that runs two micro-batches' slices out of order still gets one.
TEST(Seq1F1B, ReverseSliceOrderIsNotNoted) {
  Schedule s = generate_schedule("seq1f1b", [] {
    GeneratorOptions o{3, 4, 1};
    o.seq_slices = 2;
    return o;
  }());
  const ValidationReport report = validate(s);
  ASSERT_TRUE(report.ok()) << report.to_string();
  EXPECT_TRUE(report.notes.empty()) << report.to_string();
  EXPECT_EQ(reference_weight_gradient_order(s, 0), (std::vector<int>{1, 0, 3, 2, 5, 4, 7, 6}));
}

}  // namespace
}  // namespace pf::sched
