// Checkpoints through the C API: an interrupted run (save, load into a fresh trainer, continue)
// ends bitwise equal to an uninterrupted one, for host batches and for a data loader (whose
// position is restored); a truncated file is rejected naming the file and changes nothing. Since
// 0.17, Hugging Face Transformers folders: a trained Llama exported, its model made from the
// folder's config.json and its weights loaded into sequential and pipelined trainers, bitwise;
// folders of another model, family or shape refused naming what differs, changing nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

// ---- Hugging Face Transformers folders (since 0.17) ----

constexpr const char* kLlama = R"({"preset": "llama", "vocab": 20, "seq_len": 8, "d_model": 16, "heads": 4,
    "kv_heads": 2, "layers": 2, "mlp_hidden": 24})";

pf_model* Llama(const char* json = kLlama) {
  pf_model* model = nullptr;
  EXPECT_PF_OK(pf_model_create_from_json(json, &model));
  return model;
}

// One step on 4 rows of 8 tokens below 20, a function of `step`.
void LlamaStep(pf_trainer* trainer, int step) {
  std::vector<int32_t> inputs(32), targets(32);
  for (int i = 0; i < 32; ++i) {
    inputs[i] = (step * 31 + i * 7) % 20;
    targets[i] = (inputs[i] + 3) % 20;
  }
  const int64_t shape[2] = {4, 8};
  const pf_tensor_view in{inputs.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 2, shape, nullptr};
  const pf_tensor_view tg{targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 2, shape, nullptr};
  ASSERT_PF_OK(pf_trainer_step(trainer, &in, &tg, nullptr));
}

// Parameter `name`'s bytes.
std::string ParameterBytes(const pf_trainer* trainer, const std::string& name) {
  int64_t shape[8];
  size_t ndim = 0;
  EXPECT_PF_OK(pf_trainer_parameter_shape(trainer, name.c_str(), shape, 8, &ndim));
  size_t count = 1;
  for (size_t d = 0; d < ndim; ++d) count *= static_cast<size_t>(shape[d]);
  std::vector<float> values(count);
  EXPECT_PF_OK(pf_trainer_get_parameter(trainer, name.c_str(), values.data(), count));
  return std::string(reinterpret_cast<const char*>(values.data()), count * sizeof(float));
}

std::string Folder(const std::string& name) {
  const std::string dir = TempPath(name);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(HfFolder, AnExportedLlamaComesBackBitwise) {
  pf_model* model = Llama();
  pf_trainer* trained = nullptr;
  const pf_trainer_options options = pftest::Options(/*micro_batches=*/2, /*seed=*/7);
  ASSERT_PF_OK(pf_trainer_create(model, &options, &trained));
  LlamaStep(trained, 0);
  LlamaStep(trained, 1);  // the norms' weights move off their initial ones
  const std::string dir = Folder("hf-llama") + "/nested";
  ASSERT_PF_OK(pf_trainer_export_hf(trained, "hf-llama", dir.c_str()));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/config.json"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir + "/model.safetensors"));

  pf_model* from_hf = nullptr;
  ASSERT_PF_OK(pf_model_create_from_hf(dir.c_str(), &from_hf));
  const std::vector<std::string> names = pftest::ParameterNames(model);
  EXPECT_EQ(pftest::ParameterNames(from_hf), names);
  int64_t elements = 0, from_hf_elements = 0;
  EXPECT_PF_OK(pf_model_num_parameter_elements(model, &elements));
  EXPECT_PF_OK(pf_model_num_parameter_elements(from_hf, &from_hf_elements));
  EXPECT_EQ(from_hf_elements, elements);

  // Into the sequential trainer and into 1F1B over two ranks (each process holds every stage).
  pf_trainer_options sequential = pftest::Options(2, /*seed=*/99), pipelined = sequential;
  pipelined.schedule = "1f1b";
  pipelined.ranks = 2;
  for (const pf_trainer_options& o : {sequential, pipelined}) {
    SCOPED_TRACE(o.schedule != nullptr ? o.schedule : "sequential");
    pf_trainer* loaded = nullptr;
    ASSERT_PF_OK(pf_trainer_create(from_hf, &o, &loaded));
    EXPECT_NE(pftest::Checksum(loaded), pftest::Checksum(trained));
    ASSERT_PF_OK(pf_trainer_load_hf_weights(loaded, dir.c_str()));
    for (const std::string& name : names)
      EXPECT_EQ(ParameterBytes(loaded, name), ParameterBytes(trained, name)) << name;
    EXPECT_EQ(pftest::Checksum(loaded), pftest::Checksum(trained));
    // Exported again, the folder reads back the same.
    const std::string again = Folder("hf-llama-again");
    ASSERT_PF_OK(pf_trainer_export_hf(loaded, "hf-llama", again.c_str()));
    pf_trainer_destroy(loaded);
    pf_trainer* reloaded = nullptr;
    ASSERT_PF_OK(pf_trainer_create(from_hf, &o, &reloaded));
    ASSERT_PF_OK(pf_trainer_load_hf_weights(reloaded, again.c_str()));
    EXPECT_EQ(pftest::Checksum(reloaded), pftest::Checksum(trained));
    pf_trainer_destroy(reloaded);
  }
  pf_model_destroy(from_hf);
  pf_trainer_destroy(trained);
  pf_model_destroy(model);
}

TEST(HfFolder, FoldersThatDoNotFitAreRefusedNamingWhatDiffers) {
  // A Llama of one block exported; the two-block trainer refuses it and keeps its parameters.
  const std::string small = Folder("hf-small");
  {
    pf_model* one_block = Llama(R"({"preset": "llama", "vocab": 20, "seq_len": 8, "d_model": 16, "heads": 4,
        "kv_heads": 2, "layers": 1, "mlp_hidden": 24})");
    pf_trainer* t = nullptr;
    const pf_trainer_options o = pftest::Options();
    ASSERT_PF_OK(pf_trainer_create(one_block, &o, &t));
    ASSERT_PF_OK(pf_trainer_export_hf(t, "hf-llama", small.c_str()));
    pf_trainer_destroy(t);
    pf_model_destroy(one_block);
  }
  pf_model* model = Llama();
  pf_trainer* trainer = nullptr;
  const pf_trainer_options o = pftest::Options();
  ASSERT_PF_OK(pf_trainer_create(model, &o, &trainer));
  const std::string before = pftest::Checksum(trainer);
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(trainer, small.c_str()), PF_INVALID_ARGUMENT,
                  "pf_trainer_load_hf_weights", "model.layers.1.", "is missing");
  EXPECT_PF_ERROR(pf_trainer_load_hf_weights(trainer, "/nonexistent/hf"), PF_NOT_FOUND, "/nonexistent/hf");
  EXPECT_EQ(pftest::Checksum(trainer), before);
  // An unknown family is named, with the known ones.
  EXPECT_PF_ERROR(pf_trainer_export_hf(trainer, "hf-bert", small.c_str()), PF_INVALID_ARGUMENT, "'hf-bert'",
                  "hf-llama");
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);

  // A config.json of another model type, or none, makes no model (a model that is not a Llama
  // neither exports nor loads: bad_input_test).
  const std::string neox = Folder("hf-neox");
  std::filesystem::create_directories(neox);
  std::ofstream(neox + "/config.json") << R"({"model_type": "gpt_neox", "vocab_size": 20})";
  pf_model* out = nullptr;
  EXPECT_PF_ERROR(pf_model_create_from_hf(neox.c_str(), &out), PF_INVALID_ARGUMENT, "config.json", "gpt_neox");
  EXPECT_PF_ERROR(pf_model_create_from_hf("/nonexistent/hf", &out), PF_NOT_FOUND, "/nonexistent/hf/config.json");
  EXPECT_EQ(out, nullptr);
}

}  // namespace
