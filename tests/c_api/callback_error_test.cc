// A data loader that returns an error status: the step fails with PF_CALLBACK_ERROR carrying the
// loader's message and the micro-batch, nothing is consumed or changed, and the next step with
// good data works and matches a run that never failed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "c_api/pipeforge.h"
#include "tests/c_api/test_util.h"

namespace {

using pftest::kFeatures;
using pftest::MakeRows;
using pftest::Rows;

struct Loader {
  int64_t fail_at = -1;  // the position whose next() fails (once), -1 = never
  pf_code fail_code = PF_IO_ERROR;
  std::vector<int64_t> positions;  // every position asked for
  std::vector<int64_t> seeks;
  int64_t cursor = 0;  // a stream-style loader: serves `cursor` and advances
  Rows rows;
  int64_t input_shape[2] = {4, kFeatures};
  int64_t target_shape[1] = {4};
  int destroyed = 0;
};

pf_status* Next(void* user_data, int64_t position, pf_micro_batch* out) {
  auto* l = static_cast<Loader*>(user_data);
  l->positions.push_back(position);
  if (position == l->fail_at) {
    l->fail_at = -1;
    l->cursor += 1;  // the failed read still moved the stream on
    return pf_status_create(l->fail_code, "shard 3 is unreadable");
  }
  // Serve from the stream position, which only matches `position` if seeks are honoured.
  l->rows = MakeRows(l->cursor, 4);
  l->cursor += 1;
  out->inputs = pf_tensor_view{l->rows.inputs.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, l->input_shape, nullptr};
  out->targets = pf_tensor_view{l->rows.targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, l->target_shape, nullptr};
  return nullptr;
}

pf_status* Seek(void* user_data, int64_t position) {
  auto* l = static_cast<Loader*>(user_data);
  l->seeks.push_back(position);
  l->cursor = position;
  return nullptr;
}

void Destroy(void* user_data) { static_cast<Loader*>(user_data)->destroyed += 1; }

struct Session {
  pf_model* model = nullptr;
  pf_trainer* trainer = nullptr;
  Loader loader;

  Session() {
    model = pftest::MakeMlp();
    const pf_trainer_options options = pftest::Options(/*micro_batches=*/2);
    pf_status* status = pf_trainer_create(model, &options, &trainer);
    EXPECT_EQ(status, nullptr) << pf_status_message(status);
    pf_status_destroy(status);
    const pf_data_loader vtable{sizeof(pf_data_loader), &loader, Next, Seek, Destroy};
    status = pf_trainer_set_data_loader(trainer, &vtable);
    EXPECT_EQ(status, nullptr) << pf_status_message(status);
    pf_status_destroy(status);
  }
  ~Session() {
    pf_trainer_destroy(trainer);
    pf_model_destroy(model);
  }
  int64_t DataPosition() const {
    pf_metrics metrics{};
    metrics.struct_size = sizeof(metrics);
    pf_status* status = pf_trainer_get_metrics(trainer, &metrics);
    EXPECT_EQ(status, nullptr);
    pf_status_destroy(status);
    return metrics.data_position;
  }
};

TEST(CallbackError, SurfacesAndTheTrainerStaysUsable) {
  Session reference;
  for (int i = 0; i < 3; ++i) ASSERT_PF_OK(pf_trainer_step_from_loader(reference.trainer, nullptr));

  Session run;
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, nullptr));  // positions 0, 1
  const std::string before = pftest::Checksum(run.trainer);
  run.loader.fail_at = 3;  // micro-batch 1 of the second step
  pf_step_result result;
  std::memset(&result, 0x33, sizeof(result));
  result.struct_size = sizeof(result);
  const pf_step_result untouched = result;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, &result), PF_CALLBACK_ERROR,
                  "pf_trainer_step_from_loader", "shard 3 is unreadable", "micro-batch 1 of 2",
                  "data position 3", "IO_ERROR");
  EXPECT_EQ(std::memcmp(&result, &untouched, sizeof(result)), 0);
  EXPECT_EQ(pftest::Checksum(run.trainer), before);
  EXPECT_EQ(run.DataPosition(), 2);

  // The retry starts again at position 2; the loader is told to seek there first.
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, &result));
  EXPECT_EQ(result.samples, 8);
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, nullptr));
  EXPECT_EQ(run.DataPosition(), 6);
  EXPECT_EQ(run.loader.positions, (std::vector<int64_t>{0, 1, 2, 3, 2, 3, 4, 5}));
  EXPECT_EQ(run.loader.seeks, (std::vector<int64_t>{2}));
  EXPECT_EQ(pftest::Checksum(run.trainer), pftest::Checksum(reference.trainer));
}

TEST(CallbackError, FirstMicroBatchAndAnyCode) {
  Session run;
  run.loader.fail_at = 0;
  run.loader.fail_code = PF_CANCELLED;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, nullptr), PF_CALLBACK_ERROR, "micro-batch 0 of 2",
                  "shard 3 is unreadable", "CANCELLED");
  EXPECT_EQ(run.DataPosition(), 0);
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, nullptr));
  EXPECT_EQ(run.DataPosition(), 2);
}

pf_status* FailingSeek(void*, int64_t position) {
  return pf_status_create(PF_IO_ERROR, ("cannot seek to " + std::to_string(position)).c_str());
}

TEST(CallbackError, SeekErrorsAreCallbackErrorsToo) {
  Session run;
  run.loader.fail_at = 1;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, nullptr), PF_CALLBACK_ERROR, "micro-batch 1 of 2");
  Loader* state = &run.loader;
  const pf_data_loader bad_seek{sizeof(pf_data_loader), state, Next, FailingSeek, nullptr};
  ASSERT_PF_OK(pf_trainer_set_data_loader(run.trainer, &bad_seek));  // destroys the first vtable's copy
  EXPECT_EQ(state->destroyed, 1);
  // A new loader is assumed to start at 0, and the trainer is at 0: no seek needed.
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, nullptr));
  state->fail_at = 3;
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, nullptr), PF_CALLBACK_ERROR, "micro-batch 1 of 2");
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, nullptr), PF_CALLBACK_ERROR, "seek(2)",
                  "cannot seek to 2", "micro-batch 0 of 2");
}

}  // namespace
