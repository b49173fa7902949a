// The planner against what the pipeline trainer measures: the activation bytes each rank holds at
// its peak, for the schedules and policies the planner searches; the calibration's runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/execution/pipeline_trainer.h"
#include "runtime/planner/calibration.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/model_profile.h"
#include "tests/execution/test_util.h"

namespace pf::plan {
namespace {

using exec::testing::data_for;
using exec::testing::tiny_gpt;

struct Case {
  std::string schedule;
  int chunks;
  int micro_batches;
  std::string policy;
  std::vector<int> layers_per_stage;
};

class PredictedMemory : public ::testing::TestWithParam<Case> {};

TEST_P(PredictedMemory, EqualsTheTrainersMeasuredPeakPerRank) {
  const Case& k = GetParam();
  auto model = tiny_gpt(5);  // 8 top-level layers: embedding, 5 blocks, LayerNorm, head
  const int m = k.micro_batches;
  const Batch batch = data_for(*model, m, 0);  // 2 rows per micro-batch

  PlanRequest request;
  request.profile.sizes = {measure_micro_batch(*model, batch.micro_batch(0, m), 1)};
  request.cluster.devices_per_node = 2;
  request.batch_rows = batch.rows();
  Candidate c;
  c.schedule = k.schedule;
  c.ranks = 2;
  c.chunks = k.chunks;
  c.micro_batches = m;
  c.activation_policy = k.policy;
  c.layers_per_stage = k.layers_per_stage;
  const Prediction predicted = predict(request, c);

  exec::PipelineOptions options;
  options.schedule = k.schedule;
  options.ranks = 2;
  options.chunks = k.chunks;
  options.layers_per_stage = k.layers_per_stage;
  options.activation_policy = k.policy;
  options.base.micro_batches = m;
  exec::PipelineTrainer trainer(model, options);
  trainer.step(batch);
  const exec::PipelineStats& stats = trainer.last_stats();
  ASSERT_EQ(stats.ranks.size(), predicted.activation_bytes.size());
  for (size_t r = 0; r < stats.ranks.size(); ++r) {
    EXPECT_EQ(static_cast<double>(stats.ranks[r].peak_activation_bytes), predicted.activation_bytes[r])
        << k.schedule << " rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, PredictedMemory,
                         ::testing::Values(Case{"1f1b", 1, 4, "none", {3, 5}}, Case{"gpipe", 1, 4, "none", {4, 4}},
                                           Case{"zb-h1", 1, 4, "none", {2, 6}},
                                           Case{"interleaved-1f1b", 2, 4, "none", {2, 2, 2, 2}},
                                           Case{"zb-v", 1, 4, "none", {1, 3, 2, 2}},
                                           Case{"1f1b", 1, 4, "recompute", {3, 5}},
                                           Case{"bitpipe", 1, 4, "none", {2, 2, 2, 2}}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.schedule + "_" + info.param.policy;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// The calibration trains at every micro-batch size the plan searches (1F1B and ZB-V with m = 2,
// 4, 8, 16 that split the batch, up to the plan's most) and scales each size by itself.
TEST(Calibrate, ScalesEveryMicroBatchSizeItTrains) {
  auto model = tiny_gpt(3);  // 6 top-level layers: ZB-V's 4 stages fit
  const Batch batch = data_for(*model, 8, 0);  // 16 rows
  PlanRequest request;
  request.profile.sizes = {measure_micro_batch(*model, batch.micro_batch(0, 4), 1)};  // 4 rows; others scaled
  request.cluster.devices_per_node = 2;
  request.batch_rows = batch.rows();
  request.max_micro_batches = 16;
  auto rows_of = [](const Calibration& k) {
    std::vector<int64_t> rows;
    for (const Calibration::RowsScale& r : k.relative_scale_by_rows) {
      EXPECT_GE(r.relative, 0.1);
      EXPECT_LE(r.relative, 100);
      rows.push_back(r.rows);
    }
    return rows;
  };
  const Calibration all = calibrate(request, model, batch, OptimizerConfig(), 1);
  EXPECT_TRUE(all.measured);
  EXPECT_EQ(rows_of(all), (std::vector<int64_t>{1, 2, 4, 8}));
  // The per-size scales are relative to compute_scale: their profiled-busy-weighted mean is 1
  // when the sizes' profiled busy times are equal (one profile size, scaled).
  double mean = 0;
  for (const Calibration::RowsScale& r : all.relative_scale_by_rows) mean += r.relative / 4;
  EXPECT_NEAR(mean, 1, 1e-9);
  request.max_micro_batches = 4;
  EXPECT_EQ(rows_of(calibrate(request, model, batch, OptimizerConfig(), 1)), (std::vector<int64_t>{4, 8}));
}

}  // namespace
}  // namespace pf::plan
