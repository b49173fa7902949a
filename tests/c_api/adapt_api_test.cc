// Fail-slow adaptation through the C API (0.9): a 1F1B trainer on two ranks with rank 1 emulated
// 4x slow profiles its model on the first step, moves layers off rank 1 live and stays bitwise
// equal to the sequential trainer, step by step (pf_trainer_step) and through pf_trainer_run with
// a loader (the metrics log records the move); the pipeline's stats follow the move; an older
// struct without the 0.9 fields does not adapt; what adaptation does not support is named.
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeRows;
using pftest::Options;
using pftest::PositionLoader;
using pftest::Rows;
using pftest::Views;

constexpr int kMicroBatches = 4;
constexpr int64_t kRows = 32;  // per step

pf_trainer* MakeTrainer(const pf_trainer_options& options) {
  pf_model* model = pftest::MakeDeepMlp(256);
  pf_trainer* trainer = nullptr;
  EXPECT_PF_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model);
  return trainer;
}

pf_trainer_options Adaptive() {
  pf_trainer_options o = Options(kMicroBatches);
  o.schedule = "1f1b";
  o.stages = 2;
  o.adapt = 1;
  o.slow_rank = 1;
  o.slow_factor = 4;
  return o;
}

nlohmann::json Adaptations(pf_trainer* trainer) {
  const char* json = nullptr;
  EXPECT_PF_OK(pf_trainer_adaptations_json(trainer, &json));
  return json ? nlohmann::json::parse(json) : nlohmann::json();
}

TEST(AdaptApi, MovesLayersOffTheSlowRankAndStaysBitwiseEqualToSequential) {
  pf_trainer* sequential = MakeTrainer(Options(kMicroBatches));
  pf_trainer* adaptive = MakeTrainer(Adaptive());
  ASSERT_NE(sequential, nullptr);
  ASSERT_NE(adaptive, nullptr);
  EXPECT_EQ(Adaptations(adaptive), nlohmann::json::array());
  for (int step = 0; step < 8; ++step) {
    const Rows batch = MakeRows(step, kRows);
    Views views(batch);
    pf_step_result a, b;
    a.struct_size = b.struct_size = sizeof(pf_step_result);
    ASSERT_PF_OK(pf_trainer_step(adaptive, &views.inputs, &views.targets, &a));
    ASSERT_PF_OK(pf_trainer_step(sequential, &views.inputs, &views.targets, &b));
    ASSERT_EQ(a.loss, b.loss) << "step " << step;
    // The stats and timeline are the pipeline's that ran this step, moved or not.
    pf_rank_stats stats;
    stats.struct_size = sizeof(stats);
    EXPECT_PF_OK(pf_trainer_get_rank_stats(adaptive, 1, &stats));
    const char* svg = nullptr;
    EXPECT_PF_OK(pf_trainer_timeline_to_svg(adaptive, &svg));
  }
  const nlohmann::json moves = Adaptations(adaptive);
  ASSERT_FALSE(moves.empty()) << "rank 1 at 4x never triggered a re-partition";
  const nlohmann::json& first = moves[0];
  // Patience 3: the third slow step decides at the earliest (on a busy machine a step's timing can
  // hide the slow rank once, which delays the move; it can never come sooner).
  EXPECT_GE(first["step"].get<int>(), 3) << first.dump();
  EXPECT_EQ(first["from"], nlohmann::json::array({3, 4})) << "the default split balances parameters";
  EXPECT_LT(first["to"][1].get<int>(), 4) << first.dump();
  EXPECT_GT(first["slowdown"][1].get<double>(), 1.5) << first.dump();
  if (moves.back()["step"].get<int>() < 8) {
    int32_t layers[2] = {0, 0};
    size_t stages = 0;
    EXPECT_PF_OK(pf_trainer_partition(adaptive, layers, 2, &stages));
    EXPECT_EQ(nlohmann::json::array({layers[0], layers[1]}), moves.back()["to"]);
  }
  EXPECT_EQ(Checksum(adaptive), Checksum(sequential));
  pf_trainer_destroy(adaptive);
  pf_trainer_destroy(sequential);
}

TEST(AdaptApi, RunWithALoaderLogsTheMoveAndMatchesSequential) {
  const std::string log = ::testing::TempDir() + "/adapt_metrics.jsonl";
  pf_run_options run;
  pf_run_options_init(&run);
  run.steps = 6;
  std::string sums[2];
  for (int adapt = 0; adapt < 2; ++adapt) {
    pf_trainer* trainer = MakeTrainer(adapt ? Adaptive() : Options(kMicroBatches));
    ASSERT_NE(trainer, nullptr);
    PositionLoader loader;
    loader.rows = kRows / kMicroBatches;
    const pf_data_loader vtable = loader.vtable();
    ASSERT_PF_OK(pf_trainer_set_data_loader(trainer, &vtable));
    run.metrics_log = adapt ? log.c_str() : nullptr;
    ASSERT_PF_OK(pf_trainer_run(trainer, &run, nullptr));
    sums[adapt] = Checksum(trainer);
    if (adapt) {
      EXPECT_FALSE(Adaptations(trainer).empty());
    }
    pf_trainer_destroy(trainer);
  }
  EXPECT_EQ(sums[1], sums[0]);
  std::ifstream in(log);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 6u);
  // The first adaptation lands on the line of its step; patience (3 steps) rules out steps 1 and 2,
  // and a noisy early step may delay it.
  size_t first = 0;
  while (first < lines.size() && !lines[first].contains("adaptation")) ++first;
  ASSERT_LT(first, lines.size()) << "no metrics line carries an adaptation";
  EXPECT_GE(first, 2u);
  EXPECT_EQ(lines[first]["adaptation"]["step"], static_cast<int>(first) + 1) << lines[first].dump();
}

TEST(AdaptApi, AnOlderStructDoesNotAdapt) {
  pf_trainer_options o = Adaptive();
  o.struct_size = offsetof(pf_trainer_options, adapt_threshold);  // the 0.7 struct
  pf_trainer* trainer = MakeTrainer(o);
  ASSERT_NE(trainer, nullptr);
  pftest::TrainSteps(trainer, 4, kRows);
  EXPECT_EQ(Adaptations(trainer), nlohmann::json::array());
  pf_trainer_destroy(trainer);
  pf_trainer_options defaults;
  pf_trainer_options_init(&defaults);
  EXPECT_EQ(defaults.adapt, 0);
  EXPECT_EQ(defaults.adapt_threshold, 1.5);
  EXPECT_EQ(defaults.adapt_patience, 3);
  EXPECT_EQ(defaults.slow_rank, -1);
  EXPECT_EQ(defaults.slow_factor, 1.0);
}

TEST(AdaptApi, RefusesWhatAdaptationDoesNotSupportNamingTheField) {
  auto refused = [](pf_trainer_options o, const char* part) {
    pf_model* model = pftest::MakeDeepMlp(256);
    pf_trainer* trainer = nullptr;
    EXPECT_PF_ERROR(pf_trainer_create(model, &o, &trainer), PF_INVALID_ARGUMENT, part);
    EXPECT_EQ(trainer, nullptr);
    pf_model_destroy(model);
  };
  pf_trainer_options o = Adaptive();
  o.schedule = nullptr;
  o.slow_factor = 1;
  refused(o, "options->adapt needs a synchronous schedule");
  o = Adaptive();
  o.schedule = "pipedream";
  refused(o, "options->adapt is not supported with schedule 'pipedream'");
  o = Adaptive();
  o.adapt_threshold = 0.5;
  refused(o, "options->adapt_threshold is 0.5");
  o = Adaptive();
  o.slow_rank = 2;
  refused(o, "options->slow_rank is 2");
  o = Options(kMicroBatches);
  o.slow_rank = 0;
  o.slow_factor = 2;
  refused(o, "options->slow_factor is 2 but no schedule is set");
}

}  // namespace
