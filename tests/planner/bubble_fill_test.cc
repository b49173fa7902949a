// Bubble filling: where a timeline waits, and a pipelined trainer that runs a fill job (forward
// passes of another model) in its bubbles while staying bitwise equal to the sequential trainer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/planner/bubble_fill.h"
#include "runtime/schedules/bubbles.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::plan {
namespace {

using exec::testing::data_for;
using exec::testing::parameters_bitwise_equal;
using exec::testing::tiny_gpt;
using exec::testing::tiny_mlp;

sched::TimedAction at(const char* text, double start, double end) {
  return {sched::parse_action(text), start, end};
}

TEST(TimelineBubbles, CountsGapsHandOffsAndTheTail) {
  sched::Timeline t;
  t.ranks = {{at("0F0", 0, 2), at("0F1", 2, 4), at("0SEND_F1", 4, 4), at("0BW0", 7, 10)},
             {at("1RECV_F0", 0, 2), at("1F0", 2, 4), at("1BW0", 4, 7), at("1F1", 8, 9)}};
  const std::vector<sched::RankBubbles> b = sched::timeline_bubbles(t);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].before, (std::vector<double>{0, 0, 0, 3}));
  EXPECT_DOUBLE_EQ(b[0].after_last, 0);
  EXPECT_EQ(b[1].before, (std::vector<double>{2, 0, 0, 1}));  // the RECV's wait, then a gap
  EXPECT_DOUBLE_EQ(b[1].after_last, 1);                       // 9 .. the makespan 10
  EXPECT_DOUBLE_EQ(b[1].total(), 4);
}

TEST(EvaluationFill, RunsWholePassesThatFitTheBudget) {
  std::vector<Batch> held_out = {data_for(*tiny_mlp(2), 1, 50), data_for(*tiny_mlp(2), 1, 51)};
  EvaluationFill fill([] { return tiny_mlp(2); }, held_out, 2);
  EXPECT_DOUBLE_EQ(fill.run(0, 0.0), 0.0);
  EXPECT_EQ(fill.passes(), 0);
  const double used = fill.run(1, 0.05);
  EXPECT_GT(fill.passes(), 0);
  EXPECT_LE(used, 0.2);  // whole passes predicted to fit (a loaded machine may stretch the last)
  EXPECT_EQ(fill.samples(), fill.passes() * 2);
  EXPECT_GT(fill.mean_loss(), 0.0);
  EXPECT_THROW(fill.run(2, 1.0), Error);
}

TEST(BubbleFill, FillsTheBubblesAndLeavesTheTrainingBitwiseEqual) {
  constexpr int m = 4, steps = 5;
  auto model = tiny_gpt(5);
  auto reference = tiny_gpt(5);
  std::vector<Batch> held_out = {data_for(*tiny_mlp(2), 1, 90)};
  EvaluationFill fill([] { return tiny_mlp(2); }, held_out, 2);
  exec::PipelineOptions options;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.base.micro_batches = m;
  options.bubble_fill = [&fill](int rank, double seconds) { return fill.run(rank, seconds); };
  options.bubble_fill_safety = 1.0;
  exec::PipelineTrainer trainer(model, options);
  SequentialTrainer sequential(reference, options.base);
  double fill_us = 0;
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(*model, m, step);
    EXPECT_EQ(trainer.step(batch).loss, sequential.step(batch).loss) << "step " << step;
    double step_fill = 0;
    for (const exec::RankStats& r : trainer.last_stats().ranks) step_fill += r.fill_us;
    if (step == 0) {
      EXPECT_EQ(step_fill, 0) << "the first step has no measured bubbles yet";
    }
    fill_us += step_fill;
  }
  EXPECT_GT(fill.passes(), 0) << "1f1b on 2 ranks has bubbles; nothing was filled";
  EXPECT_GT(fill_us, 0);
  std::string diff;
  EXPECT_TRUE(parameters_bitwise_equal(*model, *reference, &diff)) << diff;
}

TEST(BubbleFill, RefusesABadSafetyFactor) {
  exec::PipelineOptions options;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.bubble_fill_safety = 0;
  EXPECT_THROW(options.validate(), Error);
}

}  // namespace
}  // namespace pf::plan
