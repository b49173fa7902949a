// The learning-rate schedules against their formulas written out here, and what the trainers do
// with them: every step's rate is the schedule's, and a resumed trainer follows it bitwise.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/runtime/trainer_fixtures.h"

namespace pf {
namespace {

double cosine_reference(double lr, double min_lr, int64_t warmup, int64_t decay, int64_t step) {
  if (step < warmup) return lr * (step + 1) / warmup;
  const double t = std::min<double>(1.0, double(step - warmup) / decay);
  return min_lr + (lr - min_lr) * (1 + std::cos(3.141592653589793 * t)) / 2;
}

TEST(LrSchedule, CosineLinearAndConstantFollowTheirFormulas) {
  LrSchedule cosine;
  cosine.kind = LrSchedule::Kind::kCosine;
  cosine.warmup_steps = 10;
  cosine.decay_steps = 90;
  cosine.min_lr = 1e-4;
  LrSchedule linear = cosine;
  linear.kind = LrSchedule::Kind::kLinear;
  LrSchedule constant;
  constant.warmup_steps = 4;
  for (int64_t step = 0; step < 130; ++step) {
    EXPECT_FLOAT_EQ(cosine.lr_at(0.01f, step), static_cast<float>(cosine_reference(0.01, 1e-4, 10, 90, step)))
        << step;
    const double t = step < 10 ? 0 : std::min<double>(1.0, double(step - 10) / 90);
    const double want_linear = step < 10 ? 0.01 * (step + 1) / 10 : 1e-4 + (0.01 - 1e-4) * (1 - t);
    EXPECT_FLOAT_EQ(linear.lr_at(0.01f, step), static_cast<float>(want_linear)) << step;
    EXPECT_FLOAT_EQ(constant.lr_at(0.01f, step), step < 4 ? 0.01f * (step + 1) / 4 : 0.01f) << step;
  }
  EXPECT_FLOAT_EQ(cosine.lr_at(0.01f, 9), 0.01f);     // the warm-up ends at lr
  EXPECT_FLOAT_EQ(cosine.lr_at(0.01f, 100), 1e-4f);  // the decay ends at min_lr and stays
  EXPECT_FLOAT_EQ(cosine.lr_at(0.01f, 1000), 1e-4f);
}

TEST(LrSchedule, BadSchedulesNameTheirField) {
  auto message = [](const LrSchedule& s, float lr) {
    try {
      s.validate(lr);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  LrSchedule s;
  s.kind = LrSchedule::Kind::kCosine;
  EXPECT_NE(message(s, 0.1f).find("decay_steps"), std::string::npos);
  s.decay_steps = 5;
  s.min_lr = 0.5;
  EXPECT_NE(message(s, 0.1f).find("min_lr"), std::string::npos);
  LrSchedule c;
  c.warmup_steps = -1;
  EXPECT_NE(message(c, 0.1f).find("warmup_steps"), std::string::npos);
  try {
    parse_lr_schedule_kind("cosin");
    FAIL() << "an unknown kind was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'cosine'"), std::string::npos) << e.what();
  }
}

TEST(LrSchedule, TheTrainerStepsWithTheScheduledRateAndAResumedOneFollowsIt) {
  MlpConfig config;
  config.input_dim = 6;
  config.hidden = {8};
  config.classes = 3;
  TrainerOptions o;
  o.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.optimizer.lr = 0.2f;
  o.lr_schedule.kind = LrSchedule::Kind::kCosine;
  o.lr_schedule.warmup_steps = 2;
  o.lr_schedule.decay_steps = 5;
  SequentialTrainer trainer(build_mlp(config), o);
  for (int64_t step = 0; step < 8; ++step) {
    const StepResult r = trainer.step(testing::teacher_batch(4, 6, 3, step));
    EXPECT_EQ(r.lr, o.lr_schedule.lr_at(0.2f, step)) << step;
    EXPECT_EQ(trainer.optimizer().config().lr, static_cast<float>(r.lr));
  }
  // A trainer whose progress is restored to step 5 takes step 5's rate.
  SequentialTrainer resumed(build_mlp(config), o);
  resumed.restore_progress(5, 0);
  EXPECT_EQ(resumed.step(testing::teacher_batch(4, 6, 3, 5)).lr, o.lr_schedule.lr_at(0.2f, 5));
}

}  // namespace
}  // namespace pf
