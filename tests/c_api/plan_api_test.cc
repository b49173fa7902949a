// The planner through the C API (0.8): plan a model on one step's batch, read the ranked
// candidates and the chart, and train the choice with pf_plan_apply: a pipelined candidate trains
// bitwise equal to the sequential trainer (a plan changes the speed, never the result). The
// caller's model is not touched by planning; bad options and cluster fields are named.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeDeepMlp;
using pftest::MakeRows;
using pftest::Options;
using pftest::Rows;
using pftest::Views;

constexpr int64_t kBatch = 16;
const char* kCluster = R"({"devices_per_node": 2, "device": {"kind": "cpu", "memory_gib": 1},
  "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}})";

pf_plan_options PlanOptions() {
  pf_plan_options o;
  pf_plan_options_init(&o);
  o.cluster_json = kCluster;
  o.repeats = 1;
  o.calibration_steps = 1;
  return o;
}

// The checksum after 3 steps of `options` on a new deep MLP.
std::string Train(const pf_trainer_options& options) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* trainer = nullptr;
  EXPECT_PF_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model);
  if (trainer == nullptr) return "";
  for (int step = 0; step < 3; ++step) {
    const Rows rows = MakeRows(step, kBatch);
    const Views views(rows);
    pf_step_result result;
    result.struct_size = sizeof(result);
    EXPECT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, &result));
  }
  const std::string sum = Checksum(trainer);
  pf_trainer_destroy(trainer);
  return sum;
}

TEST(PlanApi, RanksCandidatesAndTheChoiceTrainsBitwiseEqualToSequential) {
  pf_model* model = MakeDeepMlp();
  std::string before;
  {
    const char* json = nullptr;
    ASSERT_PF_OK(pf_model_to_json(model, &json));
    before = json;
  }
  const Rows rows = MakeRows(0, kBatch);
  const Views views(rows);
  pf_plan_options o = PlanOptions();
  o.schedules = "1f1b,zb-h1,gpipe";  // pipelines on 2 ranks in this process
  pf_trainer_options trainer_options = Options(2);
  pf_plan* plan = nullptr;
  ASSERT_PF_OK(pf_plan_create(model, &views.inputs, &views.targets, &trainer_options, &o, &plan));
  int32_t n = 0;
  ASSERT_PF_OK(pf_plan_num_candidates(plan, &n));
  ASSERT_GT(n, 3);
  double previous = 0;
  for (int32_t i = 0; i < n; ++i) {
    const char* text = nullptr;
    ASSERT_PF_OK(pf_plan_candidate_json(plan, i, &text));
    const nlohmann::json c = nlohmann::json::parse(text);
    EXPECT_GE(c["step_seconds"].get<double>(), previous);
    previous = c["step_seconds"].get<double>();
    EXPECT_TRUE(c["fits"].get<bool>());
    EXPECT_EQ(c["tensor_parallel"], 1);  // the C API's planner searches T = 1 only (no field to apply T)
  }
  const char* whole = nullptr;
  ASSERT_PF_OK(pf_plan_to_json(plan, &whole));
  EXPECT_EQ(nlohmann::json::parse(whole)["candidates"].size(), static_cast<size_t>(n));
  const char* svg = nullptr;
  ASSERT_PF_OK(pf_plan_to_svg(plan, &svg));
  EXPECT_NE(std::string(svg).find("Pareto front"), std::string::npos);

  // Planning left the model as it was (it profiled and calibrated on a copy).
  {
    const char* json = nullptr;
    ASSERT_PF_OK(pf_model_to_json(model, &json));
    EXPECT_EQ(before, json);
  }
  pf_model_destroy(model);

  // The first pipelined candidate on one replica trains bitwise equal to the sequential trainer
  // with the same micro-batches.
  bool compared = false;
  for (int32_t i = 0; i < n && !compared; ++i) {
    pf_trainer_options run = Options(2);
    ASSERT_PF_OK(pf_plan_apply(plan, i, &run));
    if (run.schedule == nullptr || run.data_parallel != 1) continue;
    EXPECT_EQ(run.num_layers_per_stage, static_cast<size_t>(run.chunks * run.stages));
    pf_trainer_options sequential = Options(run.micro_batches);
    EXPECT_EQ(Train(run), Train(sequential)) << run.schedule;
    compared = true;
  }
  EXPECT_TRUE(compared) << "no pipelined candidate on one replica";
  EXPECT_PF_ERROR(pf_plan_apply(plan, n, &trainer_options), PF_INVALID_ARGUMENT, "index is", "candidates that fit");
  pf_plan_destroy(plan);
}

TEST(PlanApi, NamesBadOptionsAndClusterFields) {
  pf_model* model = MakeDeepMlp();
  const Rows rows = MakeRows(0, kBatch);
  const Views views(rows);
  pf_plan* plan = nullptr;
  pf_plan_options o = PlanOptions();
  o.cluster_json = R"({"devices_per_node": 2, "device": {"kind": "gpu", "memory_gib": 1},
    "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}})";
  EXPECT_PF_ERROR(pf_plan_create(model, &views.inputs, &views.targets, nullptr, &o, &plan), PF_INVALID_ARGUMENT,
                  "options->cluster_json", "device.kind", "'gpu'");
  o = PlanOptions();
  o.cluster_json = "{\"nodes\": ";
  EXPECT_PF_ERROR(pf_plan_create(model, &views.inputs, &views.targets, nullptr, &o, &plan), PF_INVALID_ARGUMENT,
                  "options->cluster_json");
  o = PlanOptions();
  o.max_chunks = 0;
  EXPECT_PF_ERROR(pf_plan_create(model, &views.inputs, &views.targets, nullptr, &o, &plan), PF_INVALID_ARGUMENT,
                  "options->max_chunks");
  o = PlanOptions();
  o.schedules = "pipemare";
  EXPECT_PF_ERROR(pf_plan_create(model, &views.inputs, &views.targets, nullptr, &o, &plan), PF_INVALID_ARGUMENT,
                  "schedules", "pipemare");
  EXPECT_EQ(plan, nullptr);
  // Nothing fits: a plan with no candidates that says what would.
  o = PlanOptions();
  o.memory_limit_bytes = 10;
  ASSERT_PF_OK(pf_plan_create(model, &views.inputs, &views.targets, nullptr, &o, &plan));
  int32_t n = -1;
  ASSERT_PF_OK(pf_plan_num_candidates(plan, &n));
  EXPECT_EQ(n, 0);
  const char* whole = nullptr;
  ASSERT_PF_OK(pf_plan_to_json(plan, &whole));
  EXPECT_GT(nlohmann::json::parse(whole)["smallest_memory_that_works_bytes"].get<double>(), 10.0);
  pf_plan_destroy(plan);
  pf_plan_destroy(nullptr);
  pf_model_destroy(model);
}

}  // namespace
