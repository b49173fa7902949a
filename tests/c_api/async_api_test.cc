// Asynchronous schedules through the C API (since 0.4): options->schedule "pipedream",
// "pipedream-2bw", "spectrain" or "pipemare" with the pf_trainer_options fields of their methods,
// and pf_trainer_drain. The async semantics really reach the runtime (the parameters differ from
// 1F1B's and between method options), runs are deterministic, an option of another schedule is
// refused naming both, and drain is a no-op where nothing is in flight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeDeepMlp;
using pftest::MakeRows;
using pftest::MakeTrainer;
using pftest::Options;
using pftest::TrainAndDrain;
using pftest::TrainSteps;
using pftest::Views;

constexpr int kMicroBatches = 3;

pf_trainer_options Pipelined(const char* schedule, int ranks = 2) {
  pf_trainer_options options = Options(kMicroBatches);
  options.optimizer = PF_OPTIMIZER_SGD;  // spectrain predicts from SGD's momentum
  options.momentum = 0.9f;
  options.schedule = schedule;
  options.ranks = ranks;
  return options;
}

TEST(AsyncApi, OptionsInitSetsTheDefaults) {
  pf_trainer_options options;
  pf_trainer_options_init(&options);
  EXPECT_EQ(options.vertical_sync, 0);
  EXPECT_EQ(options.spectrain_version, 1);
  EXPECT_EQ(options.pipemare_anneal_updates, 100);
  EXPECT_FLOAT_EQ(options.pipemare_decay, 0.9f);
  // The 0.4 fields start at the 0.3 struct's end, not in its trailing padding.
  EXPECT_GE(offsetof(pf_trainer_options, pipemare_anneal_updates),
            offsetof(pf_trainer_options, ranks) + sizeof(options.ranks));
  EXPECT_EQ(offsetof(pf_trainer_options, pipemare_anneal_updates) % alignof(pf_trainer_options), 0u);
}

TEST(AsyncApi, PipeDreamDiffersFromOneFOneBAndIsDeterministic) {
  const std::string pipedream = TrainAndDrain(Pipelined("pipedream"));
  const std::string again = TrainAndDrain(Pipelined("pipedream"));
  const std::string one_f_one_b = TrainAndDrain(Pipelined("1f1b"));
  ASSERT_EQ(pipedream.size(), 64u);
  EXPECT_NE(pipedream, one_f_one_b) << "the asynchronous semantics did not reach the runtime";
  EXPECT_EQ(pipedream, again);
}

TEST(AsyncApi, DrainRunsWhatIsInFlightOnce) {
  pf_trainer* t = MakeTrainer(Pipelined("pipedream"));
  ASSERT_NE(t, nullptr);
  TrainSteps(t, 3);
  const std::string before = Checksum(t);
  // A checkpoint needs an empty pipeline.
  const std::string path = ::testing::TempDir() + "/async_api.ckpt";
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(t, path.c_str()), PF_FAILED_PRECONDITION, "in flight", "drain");
  ASSERT_PF_OK(pf_trainer_drain(t));
  const std::string drained = Checksum(t);
  EXPECT_NE(drained, before) << "the drain applied no update";
  ASSERT_PF_OK(pf_trainer_drain(t));  // an empty pipeline: a no-op
  EXPECT_EQ(Checksum(t), drained);
  ASSERT_PF_OK(pf_trainer_save_checkpoint(t, path.c_str()));
  // Training goes on after a drain (the next step refills the pipeline); a trainer that loads the
  // checkpoint goes on the same way.
  TrainSteps(t, 1);
  ASSERT_PF_OK(pf_trainer_drain(t));
  EXPECT_NE(Checksum(t), drained);
  pf_trainer* resumed = MakeTrainer(Pipelined("pipedream"));
  ASSERT_NE(resumed, nullptr);
  ASSERT_PF_OK(pf_trainer_load_checkpoint(resumed, path.c_str()));
  EXPECT_EQ(Checksum(resumed), drained);
  TrainSteps(resumed, 1);
  ASSERT_PF_OK(pf_trainer_drain(resumed));
  EXPECT_EQ(Checksum(resumed), Checksum(t));
  pf_trainer_destroy(resumed);
  pf_trainer_destroy(t);
}

TEST(AsyncApi, EveryMethodAndItsOptionsReachTheRuntime) {
  const std::string pipedream = TrainAndDrain(Pipelined("pipedream", 3));
  pf_trainer_options vertical = Pipelined("pipedream", 3);
  vertical.vertical_sync = 1;
  EXPECT_NE(TrainAndDrain(vertical), pipedream);

  const std::string two_bw = TrainAndDrain(Pipelined("pipedream-2bw"));
  EXPECT_NE(two_bw, TrainAndDrain(Pipelined("pipedream")));

  const std::string spectrain = TrainAndDrain(Pipelined("spectrain", 3));
  pf_trainer_options v2 = Pipelined("spectrain", 3);
  v2.spectrain_version = 2;
  EXPECT_NE(TrainAndDrain(v2), spectrain);

  const std::string pipemare = TrainAndDrain(Pipelined("pipemare", 3));
  pf_trainer_options no_anneal = Pipelined("pipemare", 3);
  no_anneal.pipemare_anneal_updates = -1;
  EXPECT_NE(TrainAndDrain(no_anneal), pipemare);
  pf_trainer_options short_anneal = Pipelined("pipemare", 3);
  short_anneal.pipemare_anneal_updates = 2;
  EXPECT_NE(TrainAndDrain(short_anneal), pipemare);
  pf_trainer_options no_average = Pipelined("pipemare", 3);
  no_average.pipemare_decay = -1.0f;
  EXPECT_NE(TrainAndDrain(no_average), pipemare);
  pf_trainer_options decay = Pipelined("pipemare", 3);
  decay.pipemare_decay = 0.5f;
  EXPECT_NE(TrainAndDrain(decay), pipemare);
}

// 0 in a 0.4 field means its default, so a zeroed tail asks for the defaults; so does a 0.3 struct.
TEST(AsyncApi, ZeroFieldsAndOlderStructsMeanTheDefaults) {
  const std::string expected = TrainAndDrain(Pipelined("pipemare"));
  pf_trainer_options zeros = Pipelined("pipemare");
  zeros.vertical_sync = 0;
  zeros.spectrain_version = 0;
  zeros.pipemare_anneal_updates = 0;
  zeros.pipemare_decay = 0.0f;
  EXPECT_EQ(TrainAndDrain(zeros), expected);
  // A 0.3 caller's struct ends before the 0.4 fields: what lies beyond is never read.
  pf_trainer_options older = Pipelined("pipemare");
  older.vertical_sync = 7;
  older.spectrain_version = -3;
  older.pipemare_anneal_updates = -9;
  older.pipemare_decay = 42.0f;
  older.struct_size = static_cast<uint32_t>(offsetof(pf_trainer_options, pipemare_anneal_updates));
  EXPECT_EQ(TrainAndDrain(older), expected);
  // A zeroed tail with a synchronous schedule and with the sequential trainer: nothing refused.
  pf_trainer_options sync = Pipelined("1f1b");
  sync.spectrain_version = 0;
  sync.pipemare_anneal_updates = 0;
  sync.pipemare_decay = 0.0f;
  pf_trainer* t = MakeTrainer(sync);
  EXPECT_NE(t, nullptr);
  pf_trainer_destroy(t);
  pf_trainer_options sequential = Options(kMicroBatches);
  sequential.spectrain_version = 0;
  sequential.pipemare_anneal_updates = 0;
  sequential.pipemare_decay = 0.0f;
  t = MakeTrainer(sequential);
  EXPECT_NE(t, nullptr);
  pf_trainer_destroy(t);
}

TEST(AsyncApi, AnOptionOfAnotherScheduleIsRefusedNamingBoth) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* t = nullptr;
  pf_trainer_options options = Pipelined("spectrain");
  options.vertical_sync = 1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "vertical_sync", "spectrain");
  options = Pipelined("1f1b");
  options.spectrain_version = 2;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "spectrain_version", "1f1b");
  options = Pipelined("pipedream");
  options.pipemare_anneal_updates = 5;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "pipemare_anneal_updates",
                  "pipedream");
  options = Pipelined("pipedream-2bw");
  options.pipemare_decay = -1.0f;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "pipemare_decay", "pipedream-2bw");
  // Without a schedule: refused naming the schedule the option belongs to.
  options = Options(kMicroBatches);
  options.vertical_sync = 1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "vertical_sync", "pipedream",
                  "no schedule");
  options = Options(kMicroBatches);
  options.pipemare_anneal_updates = -1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "pipemare_anneal_updates",
                  "pipemare", "no schedule");
  EXPECT_EQ(t, nullptr);  // untouched on error
  pf_model_destroy(model);
}

TEST(AsyncApi, OutOfRangeValuesAreRefusedNamingTheField) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* t = nullptr;
  pf_trainer_options options = Pipelined("pipedream");
  options.vertical_sync = 2;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "options->vertical_sync is 2");
  options = Pipelined("spectrain");
  options.spectrain_version = 3;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "spectrain_version", "3");
  options.spectrain_version = -1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "options->spectrain_version is -1");
  options = Pipelined("pipemare");
  options.pipemare_anneal_updates = -2;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT,
                  "options->pipemare_anneal_updates is -2");
  options = Pipelined("pipemare");
  for (float bad : {1.0f, 1.5f, -0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    options.pipemare_decay = bad;
    EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "options->pipemare_decay is");
  }
  EXPECT_EQ(t, nullptr);
  pf_model_destroy(model);
}

TEST(AsyncApi, DrainIsANoOpWithoutAnAsynchronousSchedule) {
  EXPECT_PF_ERROR(pf_trainer_drain(nullptr), PF_INVALID_ARGUMENT, "trainer");
  for (const char* schedule : {"1f1b", static_cast<const char*>(nullptr)}) {
    pf_trainer_options options = Pipelined("1f1b");
    options.schedule = schedule;
    if (schedule == nullptr) options.ranks = 0;
    pf_trainer* t = MakeTrainer(options);
    ASSERT_NE(t, nullptr);
    EXPECT_PF_OK(pf_trainer_drain(t));  // before any step
    TrainSteps(t, 2);
    const std::string before = Checksum(t);
    EXPECT_PF_OK(pf_trainer_drain(t));
    EXPECT_EQ(Checksum(t), before) << (schedule ? schedule : "sequential");
    pf_trainer_destroy(t);
  }
}

}  // namespace
