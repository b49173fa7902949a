// Local learning through the C API (since 0.4): options->schedule "ppll" or "local-updates" with
// options->local_head, and pf_trainer_drain. The local-learning semantics really reach the runtime
// (the parameters differ from 1F1B's, between the two schedules and between head kinds), runs are
// deterministic, a head kind for another schedule or an unknown kind is refused naming it, and a
// struct that ends before local_head means "auto".
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
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

pf_trainer_options Pipelined(const char* schedule, const char* local_head = nullptr) {
  pf_trainer_options options = Options(kMicroBatches);
  options.schedule = schedule;
  options.ranks = 2;
  options.local_head = local_head;
  return options;
}

TEST(LocalApi, OptionsInitSetsAutoAndTheFieldFollowsThePadding) {
  pf_trainer_options options;
  pf_trainer_options_init(&options);
  EXPECT_EQ(options.local_head, nullptr);
  // local_head starts at the sizeof of the struct that ends at vertical_sync, not in its padding.
  const size_t async_end = offsetof(pf_trainer_options, vertical_sync) + sizeof(options.vertical_sync);
  const size_t async_sizeof = (async_end + alignof(pf_trainer_options) - 1) / alignof(pf_trainer_options) *
                              alignof(pf_trainer_options);
  EXPECT_EQ(offsetof(pf_trainer_options, local_head), async_sizeof);
  // The 0.5 fields start where local_head ends (the 0.4 sizeof).
  EXPECT_EQ(offsetof(pf_trainer_options, lr_schedule), offsetof(pf_trainer_options, local_head) + sizeof(options.local_head));
}

TEST(LocalApi, PpllDiffersFromOneFOneBAndIsDeterministic) {
  const std::string ppll = TrainAndDrain(Pipelined("ppll"));
  const std::string again = TrainAndDrain(Pipelined("ppll"));
  const std::string one_f_one_b = TrainAndDrain(Pipelined("1f1b"));
  ASSERT_EQ(ppll.size(), 64u);
  EXPECT_NE(ppll, one_f_one_b) << "the local-learning semantics did not reach the runtime";
  EXPECT_EQ(ppll, again);
}

TEST(LocalApi, TheHeadKindAndTheScheduleReachTheRuntime) {
  const std::string ppll = TrainAndDrain(Pipelined("ppll"));
  EXPECT_EQ(TrainAndDrain(Pipelined("ppll", "auto")), ppll);    // "auto" spelled out
  EXPECT_EQ(TrainAndDrain(Pipelined("ppll", "linear")), ppll);  // what "auto" is for the MLP
  const std::string mlp = TrainAndDrain(Pipelined("ppll", "mlp"));
  EXPECT_NE(mlp, ppll);
  EXPECT_EQ(TrainAndDrain(Pipelined("ppll", "mlp")), mlp);
  EXPECT_NE(TrainAndDrain(Pipelined("ppll", "layernorm-linear")), ppll);
  const std::string local_updates = TrainAndDrain(Pipelined("local-updates"));
  EXPECT_NE(local_updates, ppll);
  EXPECT_NE(TrainAndDrain(Pipelined("local-updates", "mlp")), local_updates);
}

TEST(LocalApi, DrainRunsWhatIsInFlightAndCheckpointsAreRefused) {
  pf_trainer* t = MakeTrainer(Pipelined("ppll"));
  ASSERT_NE(t, nullptr);
  TrainSteps(t, 2);
  const std::string before = Checksum(t);
  ASSERT_PF_OK(pf_trainer_drain(t));
  const std::string drained = Checksum(t);
  EXPECT_NE(drained, before) << "the drain applied no update";
  ASSERT_PF_OK(pf_trainer_drain(t));  // an empty pipeline: a no-op
  EXPECT_EQ(Checksum(t), drained);
  const std::string path = ::testing::TempDir() + "/local_api.ckpt";
  EXPECT_PF_ERROR(pf_trainer_save_checkpoint(t, path.c_str()), PF_FAILED_PRECONDITION, "ppll",
                  "auxiliary heads are not saved");
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(t, path.c_str()), PF_FAILED_PRECONDITION, "ppll",
                  "auxiliary heads are not saved");
  EXPECT_EQ(Checksum(t), drained);
  pf_trainer_destroy(t);
}

TEST(LocalApi, AHeadForAnotherScheduleOrAnUnknownKindIsRefused) {
  pf_model* model = MakeDeepMlp();
  pf_trainer* t = nullptr;
  pf_trainer_options options = Pipelined("1f1b", "mlp");
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "local_head", "1f1b");
  options = Pipelined("pipedream", "linear");
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "local_head", "pipedream");
  // Without a schedule: refused naming the schedules it applies to.
  options = Options(kMicroBatches);
  options.local_head = "mlp";
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "local_head", "ppll",
                  "no schedule");
  // An unknown kind names itself and the known kinds, with or without a local schedule.
  for (const char* schedule : {"ppll", "1f1b", static_cast<const char*>(nullptr)}) {
    options = Pipelined(schedule, "conv");
    if (schedule == nullptr) options.ranks = 0;
    EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "local_head", "'conv'",
                    "layernorm-linear");
  }
  options = Pipelined("ppll", "");
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &t), PF_INVALID_ARGUMENT, "local_head");
  EXPECT_EQ(t, nullptr);  // untouched on error
  // "auto" (or NULL) is the default, accepted everywhere.
  for (const char* schedule : {"1f1b", static_cast<const char*>(nullptr)}) {
    options = Pipelined(schedule, "auto");
    if (schedule == nullptr) options.ranks = 0;
    EXPECT_PF_OK(pf_trainer_create(model, &options, &t));
    pf_trainer_destroy(t);
    t = nullptr;
  }
  pf_model_destroy(model);
}

// A 0.4 struct that ends at vertical_sync (with or without its trailing padding) asks for "auto":
// what lies beyond is never read.
TEST(LocalApi, AStructWithoutTheFieldMeansAuto) {
  const std::string expected = TrainAndDrain(Pipelined("ppll"));
  for (size_t size : {offsetof(pf_trainer_options, local_head),
                      offsetof(pf_trainer_options, vertical_sync) + sizeof(int32_t)}) {
    pf_trainer_options older = Pipelined("ppll", "mlp");
    older.struct_size = static_cast<uint32_t>(size);
    EXPECT_EQ(TrainAndDrain(older), expected) << "struct_size " << size;
    // With a synchronous schedule nothing is refused either.
    older.schedule = "1f1b";
    pf_trainer* t = MakeTrainer(older);
    EXPECT_NE(t, nullptr);
    pf_trainer_destroy(t);
  }
}

}  // namespace
