// Fail-slow adaptation: the detector, the partition for measured speeds, and a live re-partition
// of a pipelined trainer whose rank 1 runs 4x slower, which keeps training bitwise equal to the
// sequential trainer across the move.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/planner/fail_slow.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::plan {
namespace {

using exec::testing::data_for;
using exec::testing::parameters_bitwise_equal;
using exec::testing::tiny_gpt;

TEST(FailSlowDetector, NeedsTheSlowdownForPatienceStepsInARow) {
  FailSlowDetector d({1.0, 2.0}, FailSlowOptions{1.5, 3});
  EXPECT_FALSE(d.observe({1.0, 4.0}));  // rank 1: 2x its prediction, rank 0: 1x
  EXPECT_DOUBLE_EQ(d.slowdown()[0], 1.0);
  EXPECT_DOUBLE_EQ(d.slowdown()[1], 2.0);
  EXPECT_FALSE(d.observe({1.0, 4.0}));
  EXPECT_FALSE(d.observe({1.0, 2.2}));  // 1.1x: the streak ends
  EXPECT_FALSE(d.observe({2.0, 8.0}));  // the whole machine twice as slow, rank 1 still 2x the other
  EXPECT_FALSE(d.observe({2.0, 8.0}));
  EXPECT_TRUE(d.observe({2.0, 8.0}));
  EXPECT_THROW(d.observe({1.0}), Error);
  EXPECT_THROW(FailSlowDetector({1.0}, FailSlowOptions{1.0, 1}), Error);
}

MicroBatchCosts equal_layers(int n) {
  MicroBatchCosts m;
  m.rows = 2;
  m.tokens = 2;
  for (int i = 0; i < n; ++i) {
    LayerCosts l;
    l.forward_s = l.backward_input_s = l.backward_weight_s = 1;
    m.layers.push_back(l);
  }
  return m;
}

sched::Schedule one_f_one_b(int ranks, int micro_batches) {
  sched::ScheduleRequest r;
  r.name = "1f1b";
  r.ranks = ranks;
  r.micro_batches = micro_batches;
  return sched::make_schedule(r);
}

TEST(PartitionForSlowdown, GivesTheSlowRankLessWork) {
  const sched::Schedule s = one_f_one_b(2, 4);
  EXPECT_EQ(partition_for_slowdown(equal_layers(8), s, {1.0, 1.0}), (std::vector<int>{4, 4}));
  EXPECT_EQ(partition_for_slowdown(equal_layers(8), s, {1.0, 3.0}), (std::vector<int>{6, 2}));
  EXPECT_EQ(partition_for_slowdown(equal_layers(8), s, {3.0, 1.0}), (std::vector<int>{2, 6}));
  const std::vector<double> busy = predicted_busy_per_rank(equal_layers(8), s, {6, 2});
  EXPECT_DOUBLE_EQ(busy[0], 4 * 6 * 3.0);  // m x layers x (F + B + W)
  EXPECT_DOUBLE_EQ(busy[1], 4 * 2 * 3.0);
}

// 1F1B on 2 ranks of `m` micro-batches, rank 1 emulated 4x slow.
exec::PipelineOptions slow_rank_1(int m) {
  exec::PipelineOptions options;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.base.micro_batches = m;
  options.slow_rank = 1;
  options.slow_factor = 4.0;
  return options;
}

TEST(AdaptiveTrainer, MovesLayersOffASlowRankLiveAndStaysBitwiseEqualToSequential) {
  constexpr int m = 4, steps = 8;
  auto model = tiny_gpt(5);  // 8 top-level layers
  auto reference = tiny_gpt(5);
  const MicroBatchCosts costs = measure_micro_batch(*model, data_for(*model, m, 0).micro_batch(0, m), 3);

  const exec::PipelineOptions options = slow_rank_1(m);
  AdaptiveTrainer adaptive(model, options, costs, FailSlowOptions{1.5, 2});
  SequentialTrainer sequential(reference, options.base);
  const std::vector<int> before = adaptive.layers_per_stage();
  for (int step = 0; step < steps; ++step) {
    const Batch batch = data_for(*model, m, step);
    const StepResult a = adaptive.step(batch);
    const StepResult b = sequential.step(batch);
    ASSERT_EQ(a.loss, b.loss) << "step " << step;
  }
  ASSERT_FALSE(adaptive.adaptations().empty()) << "rank 1 at 4x never triggered a re-partition";
  const Adaptation& first = adaptive.adaptations().front();
  EXPECT_EQ(first.from, before);
  EXPECT_LT(first.to[1], first.from[1]) << "the slow rank should get fewer layers";
  EXPECT_GT(first.slowdown[1], 1.5);
  EXPECT_EQ(adaptive.metrics().step, steps);
  std::string diff;
  EXPECT_TRUE(parameters_bitwise_equal(adaptive.model(), *reference, &diff)) << diff;
}

// The step that decides keeps the partition it ran (its stats stay readable); the next step runs
// on the new one. Without a profile the first step measures one (a copy of the model, the step's
// first micro-batch) before it runs, and the thresholds come from the config.
TEST(AdaptiveTrainer, MovesAtTheStartOfTheNextStepAndProfilesAtTheFirstStep) {
  constexpr int m = 4;
  auto model = tiny_gpt(5);
  auto reference = tiny_gpt(5);
  exec::PipelineOptions options = slow_rank_1(m);
  options.adaptation.threshold = 1.5;
  options.adaptation.patience = 2;
  AdaptiveTrainer adaptive(model, options);
  SequentialTrainer sequential(reference, options.base);
  ASSERT_EQ(adaptive.step(data_for(*model, m, 0)).loss, sequential.step(data_for(*model, m, 0)).loss);
  EXPECT_EQ(adaptive.metrics().step, 1);
  for (int step = 1; step < 8 && adaptive.adaptations().empty(); ++step) {
    const Batch batch = data_for(*model, m, step);
    ASSERT_EQ(adaptive.step(batch).loss, sequential.step(batch).loss) << "step " << step;
  }
  ASSERT_FALSE(adaptive.adaptations().empty()) << "rank 1 at 4x never triggered a re-partition";
  const Adaptation& move = adaptive.adaptations().back();
  EXPECT_EQ(move.step, adaptive.metrics().step);
  EXPECT_EQ(adaptive.layers_per_stage(), move.from);
  EXPECT_EQ(adaptive.pipeline().last_stats().ranks.size(), 2u);
  const Batch next = data_for(*model, m, static_cast<int>(move.step));
  ASSERT_EQ(adaptive.step(next).loss, sequential.step(next).loss);
  EXPECT_EQ(adaptive.layers_per_stage(), move.to);
  std::string diff;
  EXPECT_TRUE(parameters_bitwise_equal(adaptive.model(), *reference, &diff)) << diff;
}

TEST(AdaptiveTrainer, RefusesWhatItCannotMove) {
  auto model = tiny_gpt(5);
  const MicroBatchCosts costs = measure_micro_batch(*model, data_for(*model, 4, 0).micro_batch(0, 4), 1);
  exec::PipelineOptions options;
  options.schedule = "pipedream";
  options.ranks = 2;
  options.base.micro_batches = 4;
  EXPECT_THROW(AdaptiveTrainer(model, options, costs, FailSlowOptions()), Error);
  options.schedule = "1f1b";
  EXPECT_THROW(AdaptiveTrainer(tiny_gpt(2), options, costs, FailSlowOptions()), Error);
}

}  // namespace
}  // namespace pf::plan
