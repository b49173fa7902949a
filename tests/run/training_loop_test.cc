// The training loop of runtime/run: a run with evaluation, a cosine learning rate, periodic
// checkpoints and a metrics log, interrupted and resumed from its newest checkpoint, ends bitwise
// where the uninterrupted run ends, with the same log; the series keeps the newest K.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/run/metrics_log.h"
#include "runtime/run/training_loop.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/runtime/trainer_fixtures.h"

namespace pf {
namespace {

namespace fs = std::filesystem;
using testing::TeacherSource;

// Teacher batches far from the training ones.
struct HeldOut : DataSource {
  TeacherSource source{2, 6, 3};
  Batch next() override { return source.next(); }
  int64_t position() const override { return source.position() - 100000; }
  void seek(int64_t p) override { source.seek(p + 100000); }
};

std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::shared_ptr<Model> model() {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {8, 8};
  config.classes = 3;
  return build_mlp(config);
}

TrainerOptions options() {
  TrainerOptions o;
  o.micro_batches = 2;
  o.seed = 5;
  o.optimizer.lr = 0.02f;
  o.lr_schedule.kind = LrSchedule::Kind::kCosine;
  o.lr_schedule.warmup_steps = 3;
  o.lr_schedule.decay_steps = 8;
  o.lr_schedule.min_lr = 1e-3;
  return o;
}

std::unique_ptr<Trainer> make_trainer(bool pipelined, const TrainerOptions& base = options()) {
  if (!pipelined) return std::make_unique<SequentialTrainer>(model(), base);
  exec::PipelineOptions p;
  p.base = base;
  p.schedule = "1f1b";
  p.ranks = 2;
  return std::make_unique<exec::PipelineTrainer>(model(), p);
}

TrainingLoopOptions loop_options(const std::string& dir, int64_t steps) {
  TrainingLoopOptions o;
  o.steps = steps;
  o.eval_every = 3;
  o.eval_micro_batches = 2;
  o.checkpoint_every = 4;
  o.checkpoint_dir = dir + "/checkpoints";
  o.keep_checkpoints = 2;
  o.metrics_log = dir + "/metrics.jsonl";
  return o;
}

// The log's lines without what depends on the machine (times, rates, bubbles).
std::vector<nlohmann::json> log_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* timing : {"seconds", "tokens_per_s", "bubble_rate"}) {
      EXPECT_TRUE(j.contains(timing)) << line;
      j.erase(timing);
    }
    lines.push_back(j);
  }
  return lines;
}

std::string checksum(const Trainer& trainer) { return parameter_checksum(trainer.model().parameters()); }

class TrainingLoop : public ::testing::TestWithParam<bool> {};

TEST_P(TrainingLoop, AnInterruptedRunResumedFromItsNewestCheckpointEqualsOneRun) {
  const bool pipelined = GetParam();
  const std::string whole = fresh_dir(pipelined ? "whole_pipelined" : "whole");
  const std::string parts = fresh_dir(pipelined ? "parts_pipelined" : "parts");

  auto one = make_trainer(pipelined);
  TeacherSource train(2, 6, 3);
  HeldOut held_out;
  std::vector<double> evaluated_at;
  const StepReport last = run_training(*one, train, &held_out, loop_options(whole, 12), [&](const StepReport& r) {
    if (r.eval) evaluated_at.push_back(static_cast<double>(r.step));
    return true;
  });
  EXPECT_EQ(last.step, 12);
  EXPECT_EQ(evaluated_at, (std::vector<double>{3, 6, 9, 12}));
  EXPECT_EQ(last.checkpoint, whole + "/checkpoints/step-00000012.pfckpt");
  EXPECT_EQ(checkpoint_steps(whole + "/checkpoints"), (std::vector<int64_t>{8, 12}));  // keep 2

  // The same run killed after step 10 (its last checkpoint is step 8's), then resumed.
  {
    auto first = make_trainer(pipelined);
    TeacherSource data(2, 6, 3);
    HeldOut eval;
    run_training(*first, data, &eval, loop_options(parts, 12), [](const StepReport& r) { return r.step < 10; });
    EXPECT_EQ(first->metrics().step, 10);
  }
  const std::string newest = resolve_checkpoint(parts + "/checkpoints");
  EXPECT_EQ(newest, parts + "/checkpoints/step-00000008.pfckpt");
  auto resumed = make_trainer(pipelined);
  load_trainer_checkpoint(*resumed, newest);
  EXPECT_EQ(resumed->metrics().step, 8);
  TeacherSource data(2, 6, 3);
  data.seek(resumed->metrics().data_position);
  HeldOut eval;
  run_training(*resumed, data, &eval, loop_options(parts, 4), nullptr);

  EXPECT_EQ(checksum(*resumed), checksum(*one));
  EXPECT_EQ(checksum(*resumed).size(), 64u);
  // The log reads as one run: the killed run's steps 9 and 10 were dropped and logged again.
  const std::vector<nlohmann::json> want = log_lines(whole + "/metrics.jsonl"), got = log_lines(parts + "/metrics.jsonl");
  ASSERT_EQ(want.size(), 12u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "line " << i + 1;
  EXPECT_EQ(want[2]["step"], 3);
  EXPECT_TRUE(want[2].contains("eval_loss") && want[2].contains("eval_accuracy"));
  EXPECT_FALSE(want[3].contains("eval_loss"));
  EXPECT_EQ(want[0]["lr"].get<double>(), static_cast<double>(options().lr_schedule.lr_at(0.02f, 0)));
  EXPECT_EQ(want[0]["peak_activation_bytes"].size(), pipelined ? 2u : 1u);
  EXPECT_GT(want[0]["peak_activation_bytes"][0].get<int64_t>(), 0);
}

// A step whose loss is finite but whose update leaves a parameter infinite ends the run at that
// step, naming the parameter (the loss alone noticed it one step later, and the series then
// refused to save that step's checkpoint with an error): no checkpoint is written for it, so the
// series' newest stays the last good one.
TEST_P(TrainingLoop, AStepThatLeavesAParameterInfiniteEndsTheRunAtThatStep) {
  const bool pipelined = GetParam();
  const std::string dir = fresh_dir(pipelined ? "infinite_pipelined" : "infinite");
  TrainingLoopOptions o;
  o.steps = 2;
  o.checkpoint_every = 1;
  o.checkpoint_dir = dir + "/checkpoints";
  TeacherSource data(2, 6, 3);
  run_training(*make_trainer(pipelined), data, nullptr, o, nullptr);

  // The run goes on from step 2 with AdamW's decoupled weight decay at 1e38 and lr 100: the
  // first update multiplies every weight by 1 - 1e40.
  TrainerOptions exploding = options();
  exploding.optimizer.lr = 100.0f;
  exploding.optimizer.weight_decay = 1e38f;
  exploding.lr_schedule = LrSchedule();
  auto trainer = make_trainer(pipelined, exploding);
  load_trainer_checkpoint(*trainer, resolve_checkpoint(o.checkpoint_dir));
  data.seek(trainer->metrics().data_position);
  o.steps = 3;
  std::vector<StepReport> seen;
  const StepReport last = run_training(*trainer, data, nullptr, o, [&](const StepReport& r) {
    seen.push_back(r);
    return true;
  });
  ASSERT_EQ(seen.size(), 1u) << "the run went on after a parameter became infinite";
  EXPECT_EQ(last.step, 3);
  EXPECT_TRUE(std::isfinite(last.result.loss)) << last.result.loss;
  EXPECT_EQ(last.divergence, "parameter 'fc0.weight' has an infinity at element 0 after the update");
  EXPECT_EQ(seen[0].divergence, last.divergence);
  EXPECT_TRUE(last.checkpoint.empty());
  EXPECT_EQ(checkpoint_steps(o.checkpoint_dir), (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE(std::isfinite(trainer->model().parameters()[0]->value.to_vector()[0]));
  auto reloaded = make_trainer(pipelined);
  load_trainer_checkpoint(*reloaded, resolve_checkpoint(o.checkpoint_dir));
  EXPECT_EQ(reloaded->metrics().step, 2);
}

// The loss, then the gradient norm, name what diverged first.
TEST(TrainingLoop, ANonFiniteLossOrGradientNormIsTheDivergence) {
  TrainerOptions clipped = options();
  clipped.optimizer.clip_norm = 1.0f;
  clipped.optimizer.lr = 1e30f;
  clipped.optimizer.kind = OptimizerConfig::Kind::kSgd;
  clipped.lr_schedule = LrSchedule();
  auto trainer = make_trainer(false, clipped);
  TeacherSource data(2, 6, 3);
  TrainingLoopOptions o;
  o.steps = 10;
  const StepReport last = run_training(*trainer, data, nullptr, o, nullptr);
  EXPECT_LT(last.step, 10);
  EXPECT_FALSE(last.divergence.empty());
  EXPECT_EQ(last.divergence.rfind(std::isfinite(last.result.loss) ? "the gradient norm is " : "the loss is ", 0), 0u)
      << last.divergence << " (loss " << last.result.loss << ", gradient norm " << last.result.grad_norm << ")";
}

INSTANTIATE_TEST_SUITE_P(Trainers, TrainingLoop, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Pipelined1F1B" : "Sequential"; });

TEST(TrainingLoop, BadOptionsAndInputsAreNamed) {
  auto trainer = make_trainer(false);
  TeacherSource data(2, 6, 3);
  auto message = [&](TrainingLoopOptions o, DataSource* held_out) {
    try {
      run_training(*trainer, data, held_out, o, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  TrainingLoopOptions o;
  o.steps = 1;
  o.eval_every = 2;
  EXPECT_NE(message(o, nullptr).find("held-out"), std::string::npos);
  o.eval_every = 0;
  o.checkpoint_every = 2;
  EXPECT_NE(message(o, nullptr).find("checkpoint_dir"), std::string::npos);
  o.checkpoint_every = 0;
  o.steps = -1;
  EXPECT_NE(message(o, nullptr).find("steps"), std::string::npos);

  const std::string dir = fresh_dir("bad_log");
  std::ofstream(dir + "/foreign.jsonl") << "{\"step\": 1}\nnot json\n";
  try {
    MetricsLog log(dir + "/foreign.jsonl", 5);
    FAIL() << "a foreign log was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  try {
    resolve_checkpoint(dir);
    FAIL() << "a folder without checkpoints was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pf
