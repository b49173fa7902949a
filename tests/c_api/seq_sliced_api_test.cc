// Sequence-sliced 1F1B through the C API (0.7): pf_trainer_options.seq_slices with schedule
// "seq1f1b" trains the GPT on sequence slices, within the runtime's stated tolerance of the unsliced
// 1f1b run (losses within 1e-5 relative, not bitwise), holding less activation memory on rank 0;
// seq_slices 1 (and 0, the default, and an older caller's struct that ends before the field) is
// 1f1b bitwise; bad values come back as PF_INVALID_ARGUMENT naming seq_slices.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::Hash;

constexpr int64_t kVocab = 32;
constexpr int64_t kSeqLen = 16;
constexpr int64_t kRows = 4;
constexpr int kSteps = 3;
constexpr double kTolerance = 1e-5;  // the runtime's (tests/execution/seq_sliced_test.cc)

pf_model* MakeGpt() {
  pf_gpt_config config;
  pf_gpt_config_init(&config);
  config.vocab = kVocab;
  config.seq_len = kSeqLen;
  config.d_model = 16;
  config.heads = 2;
  config.layers = 2;
  pf_model* model = nullptr;
  EXPECT_PF_OK(pf_model_create_gpt(&config, &model));
  return model;
}

// Token rows of step `step`: inputs [rows, steps] and the next-token targets, from (step, r, t) alone.
struct Tokens {
  std::vector<int32_t> inputs, targets;
  int64_t shape[2];
  pf_tensor_view input_view, target_view;

  Tokens(int step, int64_t rows = kRows, int64_t steps = kSeqLen) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t <= steps; ++t) {
        const int32_t token = static_cast<int32_t>(Hash((static_cast<uint64_t>(step) * 100 + r) * 100 + t) % kVocab);
        if (t < steps) inputs.push_back(token);
        if (t > 0) targets.push_back(token);
      }
    shape[0] = rows;
    shape[1] = steps;
    input_view = pf_tensor_view{inputs.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 2, shape, nullptr};
    target_view = pf_tensor_view{targets.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 2, shape, nullptr};
  }
  Tokens(const Tokens&) = delete;
};

pf_trainer_options GptOptions(const char* schedule, int32_t seq_slices) {
  pf_trainer_options options;
  pf_trainer_options_init(&options);
  options.micro_batches = 2;
  options.seed = 11;
  options.lr = 0.01f;
  options.schedule = schedule;
  options.stages = schedule != nullptr ? 2 : 1;
  options.seq_slices = seq_slices;
  return options;
}

struct TrainRun {
  std::vector<double> losses;
  std::string checksum;
  pf_rank_stats rank0{};
  bool ok = false;
};

// kSteps steps on Tokens(step) of a trainer on a new GPT built with `options`.
TrainRun Train(const pf_trainer_options& options) {
  TrainRun run;
  pf_model* model = MakeGpt();
  pf_trainer* trainer = nullptr;
  pf_status* status = pf_trainer_create(model, &options, &trainer);
  pf_model_destroy(model);
  EXPECT_EQ(status, nullptr) << pf_status_message(status);
  pf_status_destroy(status);
  if (trainer == nullptr) return run;
  for (int step = 0; step < kSteps; ++step) {
    Tokens batch(step);
    pf_step_result result;
    result.struct_size = sizeof(result);
    status = pf_trainer_step(trainer, &batch.input_view, &batch.target_view, &result);
    EXPECT_EQ(status, nullptr) << pf_status_message(status);
    pf_status_destroy(status);
    if (status != nullptr) break;
    EXPECT_TRUE(std::isfinite(result.loss)) << "step " << step;
    run.losses.push_back(result.loss);
  }
  run.checksum = Checksum(trainer);
  if (options.schedule != nullptr || options.schedule_text != nullptr) {
    run.rank0.struct_size = sizeof(run.rank0);
    EXPECT_PF_OK(pf_trainer_get_rank_stats(trainer, 0, &run.rank0));
  }
  pf_trainer_destroy(trainer);
  run.ok = static_cast<int>(run.losses.size()) == kSteps;
  return run;
}

void ExpectLossesWithinTolerance(const TrainRun& sliced, const TrainRun& whole, const char* what) {
  ASSERT_TRUE(sliced.ok && whole.ok) << what;
  for (int step = 0; step < kSteps; ++step) {
    const double relative = std::fabs(sliced.losses[step] - whole.losses[step]) / std::fabs(whole.losses[step]);
    EXPECT_LT(relative, kTolerance) << what << ", step " << step << ": " << sliced.losses[step] << " vs "
                                    << whole.losses[step];
  }
}

TEST(SeqSlicedApi, InitSetsOneSlice) {
  pf_trainer_options options;
  options.seq_slices = -5;
  pf_trainer_options_init(&options);
  EXPECT_EQ(options.seq_slices, 1);
  EXPECT_EQ(options.struct_size, sizeof(pf_trainer_options));
  EXPECT_EQ(offsetof(pf_trainer_options, seq_slices), 224u);  // the 0.6 sizeof: appended at the end
}

TEST(SeqSlicedApi, TwoSlicesEqualUnsliced1f1bWithinTolerance) {
  const TrainRun whole = Train(GptOptions("1f1b", 1));
  const TrainRun sliced = Train(GptOptions("seq1f1b", 2));
  ExpectLossesWithinTolerance(sliced, whole, "seq1f1b, seq_slices 2");
  // The slicing really happened: rank 0 holds p + S - 1 = 3 units of half a micro-batch each
  // instead of p = 2 micro-batches.
  EXPECT_EQ(whole.rank0.peak_activations, 2);
  EXPECT_EQ(sliced.rank0.peak_activations, 3);
  EXPECT_LT(sliced.rank0.peak_activation_bytes, whole.rank0.peak_activation_bytes);
  EXPECT_GT(sliced.rank0.peak_activation_bytes, 0);
}

// S = 1 (and 0, the default) with seq1f1b is 1f1b: bitwise equal to it and to the sequential trainer.
TEST(SeqSlicedApi, OneSliceIs1f1bBitwise) {
  const TrainRun sequential = Train(GptOptions(nullptr, 1));
  const TrainRun whole = Train(GptOptions("1f1b", 1));
  ASSERT_TRUE(sequential.ok && whole.ok);
  EXPECT_EQ(whole.losses, sequential.losses);
  EXPECT_EQ(whole.checksum, sequential.checksum);
  for (int32_t slices : {1, 0}) {
    const TrainRun one = Train(GptOptions("seq1f1b", slices));
    ASSERT_TRUE(one.ok) << "seq_slices " << slices;
    EXPECT_EQ(one.losses, whole.losses) << "seq_slices " << slices;
    EXPECT_EQ(one.checksum, whole.checksum) << "seq_slices " << slices;
    EXPECT_EQ(one.rank0.peak_activations, 2) << "seq_slices " << slices;
  }
  // The sequential trainer takes seq_slices 1 and 0 too.
  EXPECT_EQ(Train(GptOptions(nullptr, 0)).checksum, sequential.checksum);
}

// A caller built against the 0.6 header passes a struct that ends before seq_slices: it means 1,
// whatever lies beyond the caller's struct_size.
TEST(SeqSlicedApi, OlderStructWithoutTheFieldMeansOneSlice) {
  const TrainRun whole = Train(GptOptions("1f1b", 1));
  pf_trainer_options options = GptOptions("seq1f1b", 3);  // 3 would fail: seq_len 16
  options.struct_size = static_cast<uint32_t>(offsetof(pf_trainer_options, seq_slices));
  const TrainRun old = Train(options);
  ASSERT_TRUE(old.ok);
  EXPECT_EQ(old.losses, whole.losses);
  EXPECT_EQ(old.checksum, whole.checksum);
  EXPECT_EQ(old.rank0.peak_activations, 2);  // one slice per micro-batch
  pf_trainer_options sequential = GptOptions(nullptr, 2);  // 2 without a schedule would be refused
  sequential.struct_size = static_cast<uint32_t>(offsetof(pf_trainer_options, seq_slices));
  EXPECT_TRUE(Train(sequential).ok);
  // The struct of this header with the field set does slice (and refuses 3).
  options.struct_size = sizeof(options);
  pf_model* model = MakeGpt();
  pf_trainer* out = nullptr;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "seq_slices 3");
  EXPECT_EQ(out, nullptr);
  pf_model_destroy(model);
}

// The text form carries a sliced schedule ("seq_slices: 2"); options.seq_slices must agree with it.
TEST(SeqSlicedApi, ScheduleTextWithSlices) {
  const char* text =
      "# pipeforge schedule v1\n"
      "name: seq1f1b\n"
      "ranks: 2\n"
      "stages: 2\n"
      "microbatches: 4\n"
      "seq_slices: 2\n"
      "placement: one-per-rank\n"
      "rank 0: 0F0 0F1 0F2 0BW1 0F3 0BW0 0BW3 0BW2 0STEP\n"
      "rank 1: 1F0 1F1 1BW1 1F2 1BW0 1F3 1BW3 1BW2 1STEP\n";
  pf_trainer_options options = GptOptions(nullptr, 2);
  options.schedule_text = text;
  const TrainRun from_text = Train(options);
  const TrainRun generated = Train(GptOptions("seq1f1b", 2));
  ASSERT_TRUE(from_text.ok && generated.ok);
  EXPECT_EQ(from_text.losses, generated.losses);  // the same schedule: bitwise
  EXPECT_EQ(from_text.checksum, generated.checksum);
  pf_model* model = MakeGpt();
  pf_trainer* out = nullptr;
  options.seq_slices = 1;
  EXPECT_PF_ERROR(pf_trainer_create(model, &options, &out), PF_INVALID_ARGUMENT, "seq_slices 2", "seq_slices is 1");
  EXPECT_EQ(out, nullptr);
  pf_model_destroy(model);
}

TEST(SeqSlicedApiBadInput, CreateReportsSeqSlices) {
  pf_model* gpt = MakeGpt();
  pf_trainer* const sentinel = reinterpret_cast<pf_trainer*>(0x1);
  pf_trainer* out = sentinel;
  pf_trainer_options options = GptOptions("seq1f1b", 3);
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT,
                  "seq_slices 3 must divide the model's seq_len 16");
  options.seq_slices = -1;
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT, "options->seq_slices is -1");
  options = GptOptions("1f1b", 2);
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT, "1f1b does not slice sequences",
                  "seq_slices");
  options = GptOptions("zb-auto", 2);
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT, "zb-auto does not slice sequences",
                  "seq_slices");
  options = GptOptions("pipedream", 2);
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT, "seq_slices");
  options = GptOptions(nullptr, 2);
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT, "options->seq_slices is 2",
                  "no schedule", "seq1f1b");
  options = GptOptions("seq1f1b", 2);
  options.activation_policy = "recompute";
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT,
                  "options->seq_slices 2 needs options->activation_policy none");
  options = GptOptions("seq1f1b", 2);
  options.devices = "cuda:0";  // refused before the device is probed, GPU or not
  EXPECT_PF_ERROR(pf_trainer_create(gpt, &options, &out), PF_INVALID_ARGUMENT,
                  "options->seq_slices 2 runs on the CPU only; options->devices names a CUDA device");
  options = GptOptions("seq1f1b", 2);
  options.processes = PF_PROCESSES_MPI;  // not launched by mpirun
  pf_status* status = pf_trainer_create(gpt, &options, &out);
  ASSERT_NE(status, nullptr);
  EXPECT_NE(pf_status_code(status), PF_OK);
  pf_status_destroy(status);
  EXPECT_EQ(out, sentinel);
  pf_model_destroy(gpt);

  pf_model* mlp = pftest::MakeDeepMlp();
  options = GptOptions("seq1f1b", 2);
  EXPECT_PF_ERROR(pf_trainer_create(mlp, &options, &out), PF_INVALID_ARGUMENT,
                  "seq_slices 2 slices token sequences");
  EXPECT_EQ(out, sentinel);
  pf_model_destroy(mlp);
}

// A batch whose sequence length the slices do not divide fails the step (the trainer is unchanged:
// the next step equals a fresh trainer's first).
TEST(SeqSlicedApiBadInput, StepReportsSeqSlices) {
  pf_model* model = MakeGpt();
  const pf_trainer_options options = GptOptions("seq1f1b", 2);
  pf_trainer* trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, &options, &trainer));
  pf_model_destroy(model);
  Tokens odd(0, kRows, kSeqLen - 1);
  pf_step_result result;
  result.struct_size = sizeof(result);
  result.loss = -1;
  EXPECT_PF_ERROR(pf_trainer_step(trainer, &odd.input_view, &odd.target_view, &result), PF_INVALID_ARGUMENT,
                  "seq_slices 2 must divide the sequence length 15");
  EXPECT_EQ(result.loss, -1);  // untouched
  Tokens good(0);
  ASSERT_PF_OK(pf_trainer_step(trainer, &good.input_view, &good.target_view, &result));
  const TrainRun fresh = Train(options);
  ASSERT_TRUE(fresh.ok);
  EXPECT_EQ(result.loss, fresh.losses[0]);
  pf_trainer_destroy(trainer);
}

}  // namespace
