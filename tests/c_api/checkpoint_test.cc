// Checkpoints through the C API: an interrupted run (save, load into a fresh trainer, continue)
// ends bitwise equal to an uninterrupted one, for host batches and for a data loader (whose
// position is restored); a truncated file is rejected naming the file and changes nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "c_api/pipeforge.h"
#include "tests/c_api/test_util.h"

namespace {

using pftest::kFeatures;
using pftest::MakeRows;
using pftest::Rows;
using pftest::Views;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A stateless loader: micro-batch `position` is MakeRows(position, 4).
struct Loader {
  Rows rows;
  int64_t input_shape[2] = {4, kFeatures};
  int64_t target_shape[1] = {4};
};

pf_status* Next(void* user_data, int64_t position, pf_micro_batch* out) {
  auto* l = static_cast<Loader*>(user_data);
  l->rows = MakeRows(position, 4);
  out->inputs = pf_tensor_view{l->rows.inputs.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, l->input_shape, nullptr};
  out->targets = pf_tensor_view{l->rows.targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, l->target_shape, nullptr};
  return nullptr;
}

struct Trainer {
  pf_model* model = pftest::MakeMlp();
  pf_trainer* trainer = nullptr;
  Loader loader;

  // A different seed for the resumed trainer proves that loading replaces the parameters.
  explicit Trainer(uint64_t seed = 7) {
    const pf_trainer_options options = pftest::Options(/*micro_batches=*/2, seed);
    pf_status* status = pf_trainer_create(model, &options, &trainer);
    EXPECT_EQ(status, nullptr) << pf_status_message(status);
    pf_status_destroy(status);
    const pf_data_loader vtable{sizeof(pf_data_loader), &loader, Next, nullptr, nullptr};
    status = pf_trainer_set_data_loader(trainer, &vtable);
    EXPECT_EQ(status, nullptr) << pf_status_message(status);
    pf_status_destroy(status);
  }
  ~Trainer() {
    pf_trainer_destroy(trainer);
    pf_model_destroy(model);
  }
  void HostSteps(int first, int count) {
    for (int s = first; s < first + count; ++s) {
      Rows rows = MakeRows(1000 + s, 8);
      Views views(rows);
      ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
    }
  }
  void LoaderSteps(int count) {
    for (int s = 0; s < count; ++s) ASSERT_PF_OK(pf_trainer_step_from_loader(trainer, nullptr));
  }
  pf_metrics Metrics() const {
    pf_metrics metrics{};
    metrics.struct_size = sizeof(metrics);
    pf_status* status = pf_trainer_get_metrics(trainer, &metrics);
    EXPECT_EQ(status, nullptr);
    pf_status_destroy(status);
    return metrics;
  }
};

TEST(Checkpoint, ResumedRunMatchesUninterruptedRun) {
  Trainer uninterrupted;
  uninterrupted.HostSteps(0, 3);
  uninterrupted.LoaderSteps(3);
  uninterrupted.HostSteps(3, 2);
  uninterrupted.LoaderSteps(2);

  const std::string path = TempPath("resume.ckpt");
  {
    Trainer first;
    first.HostSteps(0, 3);
    first.LoaderSteps(3);
    ASSERT_PF_OK(pf_trainer_save_checkpoint(first.trainer, path.c_str()));
  }
  Trainer resumed(/*seed=*/99);
  const std::string fresh = pftest::Checksum(resumed.trainer);
  ASSERT_PF_OK(pf_trainer_load_checkpoint(resumed.trainer, path.c_str()));
  EXPECT_NE(pftest::Checksum(resumed.trainer), fresh);
  EXPECT_EQ(resumed.Metrics().step, 6);
  EXPECT_EQ(resumed.Metrics().data_position, 6);
  resumed.HostSteps(3, 2);
  resumed.LoaderSteps(2);

  EXPECT_EQ(pftest::Checksum(resumed.trainer), pftest::Checksum(uninterrupted.trainer));
  EXPECT_EQ(resumed.Metrics().step, uninterrupted.Metrics().step);
  EXPECT_EQ(resumed.Metrics().data_position, uninterrupted.Metrics().data_position);
  EXPECT_EQ(resumed.Metrics().last_loss, uninterrupted.Metrics().last_loss);
}

TEST(Checkpoint, TruncatedFileIsRejectedNamingTheFile) {
  const std::string path = TempPath("whole.ckpt");
  const std::string truncated = TempPath("truncated.ckpt");
  {
    Trainer t;
    t.HostSteps(0, 2);
    ASSERT_PF_OK(pf_trainer_save_checkpoint(t.trainer, path.c_str()));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() - 40);

  Trainer t(/*seed=*/5);
  t.HostSteps(0, 1);
  const std::string before = pftest::Checksum(t.trainer);
  EXPECT_PF_ERROR(pf_trainer_load_checkpoint(t.trainer, truncated.c_str()), PF_DATA_LOSS, truncated.c_str());
  EXPECT_EQ(pftest::Checksum(t.trainer), before);
  EXPECT_EQ(t.Metrics().step, 1);
  // The intact file still loads into the same trainer.
  ASSERT_PF_OK(pf_trainer_load_checkpoint(t.trainer, path.c_str()));
  EXPECT_EQ(t.Metrics().step, 2);
}

}  // namespace
