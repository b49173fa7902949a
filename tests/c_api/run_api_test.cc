// The training loop through the C API (since 0.5): learning-rate schedules, evaluation, the
// built-in data loaders, pf_trainer_run with periodic checkpoints and a metrics log, resumed from
// its checkpoint folder bitwise, the partition, the balanced partitioner, (since 0.10) the split
// by parameter count, (since 0.17) the token-file loader and (since 0.18) the CIFAR-10 loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "tests/c_api/test_util.h"

namespace {

namespace fs = std::filesystem;

// A tiny GPT and its trainer, on the built-in char-text loader (MakeTextRun) or a token file
// (MakeTokenRun).
struct TextRun {
  pf_model* model = nullptr;
  pf_trainer* trainer = nullptr;
  ~TextRun() {
    pf_trainer_destroy(trainer);
    pf_model_destroy(model);
  }
};

pf_builtin_data_options TextData(int held_out) {
  pf_builtin_data_options d;
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_CHAR_TEXT;
  d.rows = 2;
  d.seq_len = 16;
  d.seed = 3;
  d.held_out_fraction = 0.1;
  d.held_out = held_out;
  return d;
}

// Creates the model and trainer (1F1B on 2 ranks, cosine rate) with both loaders installed.
void MakeTextRun(TextRun* run) {
  pf_data_loader train{}, eval{};
  int64_t info[2] = {0, 0};
  pf_builtin_data_options train_data = TextData(0), eval_data = TextData(1);
  ASSERT_PF_OK(pf_data_loader_create_builtin(&train_data, &train, info));
  EXPECT_GT(info[0], 40);  // the licence texts' distinct bytes
  EXPECT_EQ(info[1], 16);
  pf_gpt_config config;
  pf_gpt_config_init(&config);
  config.vocab = info[0];
  config.seq_len = info[1];
  config.d_model = 16;
  config.heads = 2;
  config.layers = 2;
  ASSERT_PF_OK(pf_model_create_gpt(&config, &run->model));
  pf_trainer_options o;
  pf_trainer_options_init(&o);
  o.micro_batches = 2;
  o.seed = 7;
  o.lr = 0.01f;
  o.schedule = "1f1b";
  o.ranks = 2;
  o.lr_schedule = "cosine";
  o.warmup_steps = 2;
  o.decay_steps = 6;
  o.min_lr = 1e-4;
  ASSERT_PF_OK(pf_trainer_create(run->model, &o, &run->trainer));
  ASSERT_PF_OK(pf_trainer_set_data_loader(run->trainer, &train));
  ASSERT_PF_OK(pf_data_loader_create_builtin(&eval_data, &eval, nullptr));
  ASSERT_PF_OK(pf_trainer_set_eval_loader(run->trainer, &eval));
}

std::string Checksum(pf_trainer* trainer) {
  char hex[65];
  EXPECT_PF_OK(pf_trainer_parameter_checksum(trainer, hex));
  return hex;
}

std::string Dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  return dir.string();
}

std::vector<std::string> LogLinesWithoutTimes(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    // Everything before "tokens" (step, loss, lr, grad_norm) is machine-independent.
    lines.push_back(line.substr(0, line.find("\"tokens\"")));
  }
  return lines;
}

TEST(RunApi, ARunResumedFromItsCheckpointFolderEqualsOneRun) {
  const std::string whole = Dir("capi_whole"), parts = Dir("capi_parts");
  pf_run_options run;
  pf_run_options_init(&run);
  run.eval_every = 3;
  run.eval_micro_batches = 2;
  run.checkpoint_every = 3;
  run.keep_checkpoints = 2;

  TextRun one;
  MakeTextRun(&one);
  run.steps = 7;
  const std::string whole_dir = whole + "/ck", whole_log = whole + "/m.jsonl";
  run.checkpoint_dir = whole_dir.c_str();
  run.metrics_log = whole_log.c_str();
  pf_run_result result;
  result.struct_size = sizeof(result);
  ASSERT_PF_OK(pf_trainer_run(one.trainer, &run, &result));
  EXPECT_EQ(result.step, 7);
  EXPECT_EQ(result.steps_run, 7);
  EXPECT_EQ(result.evaluations, 3);  // 3, 6 and the last
  EXPECT_EQ(result.checkpoints, 3);  // 3, 6, 7; two kept
  EXPECT_TRUE(std::isfinite(result.eval_loss));
  EXPECT_GT(result.eval_accuracy, 0.0);
  EXPECT_EQ(result.diverged, 0);
  EXPECT_EQ(result.divergence, nullptr);
  ASSERT_NE(result.last_checkpoint, nullptr);
  EXPECT_EQ(std::string(result.last_checkpoint), whole_dir + "/step-00000007.pfckpt");
  EXPECT_FALSE(fs::exists(whole_dir + "/step-00000003.pfckpt"));
  EXPECT_TRUE(fs::exists(whole_dir + "/step-00000006.pfckpt"));

  // Three steps in one trainer, the other four in a new one resumed from the folder.
  const std::string parts_dir = parts + "/ck", parts_log = parts + "/m.jsonl";
  run.checkpoint_dir = parts_dir.c_str();
  run.metrics_log = parts_log.c_str();
  {
    TextRun first;
    MakeTextRun(&first);
    run.steps = 3;
    ASSERT_PF_OK(pf_trainer_run(first.trainer, &run, nullptr));
  }
  TextRun rest;
  MakeTextRun(&rest);
  ASSERT_PF_OK(pf_trainer_load_checkpoint(rest.trainer, parts_dir.c_str()));
  run.steps = 4;
  ASSERT_PF_OK(pf_trainer_run(rest.trainer, &run, &result));
  EXPECT_EQ(result.step, 7);
  EXPECT_EQ(Checksum(rest.trainer), Checksum(one.trainer));
  const std::vector<std::string> want = LogLinesWithoutTimes(whole_log), got = LogLinesWithoutTimes(parts_log);
  EXPECT_EQ(want.size(), 7u);
  EXPECT_EQ(got, want);

  // Evaluation sees the same held-out micro-batches every time and trains nothing.
  pf_eval_result a, b;
  a.struct_size = b.struct_size = sizeof(pf_eval_result);
  ASSERT_PF_OK(pf_trainer_evaluate(one.trainer, 2, &a));
  ASSERT_PF_OK(pf_trainer_evaluate(one.trainer, 2, &b));
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.loss, result.eval_loss);  // the resumed run's last evaluation, on the same weights
  EXPECT_EQ(a.samples, 4);
  EXPECT_EQ(a.targets, 4 * 16);
  EXPECT_EQ(Checksum(one.trainer), Checksum(rest.trainer));
}

// The per-step callback (0.12, issue 43 item 3): it sees every step's report, and returning
// non-zero ends the run after that step with the series' checkpoint of that step written; the
// rest, resumed from it, ends where an uninterrupted run ends. Options of the 0.5 size (no
// callback) still run every step.
struct Watcher {
  std::vector<pf_step_report> reports;
  int64_t stop_at = 0;
};

int32_t WatchSteps(const pf_step_report* report, void* user_data) {
  auto* w = static_cast<Watcher*>(user_data);
  w->reports.push_back(*report);
  return report->step == w->stop_at ? 1 : 0;
}

TEST(RunApi, TheStepCallbackWatchesAndStopsTheRunWithItsCheckpoint) {
  const std::string dir = Dir("capi_callback") + "/ck";
  pf_run_options run;
  pf_run_options_init(&run);
  run.steps = 7;
  run.checkpoint_every = 100;  // only the last (or the stopped) step's
  run.checkpoint_dir = dir.c_str();
  Watcher watcher;
  watcher.stop_at = 3;
  run.on_step = WatchSteps;
  run.on_step_user_data = &watcher;
  TextRun stopped;
  MakeTextRun(&stopped);
  pf_run_result result;
  result.struct_size = sizeof(result);
  ASSERT_PF_OK(pf_trainer_run(stopped.trainer, &run, &result));
  EXPECT_EQ(result.stopped, 1);
  EXPECT_EQ(result.step, 3);
  EXPECT_EQ(result.steps_run, 3);
  ASSERT_EQ(watcher.reports.size(), 3u);
  for (size_t i = 0; i < watcher.reports.size(); ++i) {
    const pf_step_report& r = watcher.reports[i];
    EXPECT_EQ(r.struct_size, sizeof(pf_step_report));
    EXPECT_EQ(r.step, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(r.steps_run, static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_GT(r.lr, 0.0);
    EXPECT_GT(r.tokens, 0);
    EXPECT_GE(r.seconds, 0.0);
  }
  ASSERT_NE(result.last_checkpoint, nullptr);
  EXPECT_EQ(std::string(result.last_checkpoint), dir + "/step-00000003.pfckpt");

  // The 0.5 layouts (options of 56 bytes, no callback fields; a result of 72, no `stopped`): all 7
  // steps, and nothing written past the caller's 72 bytes.
  TextRun whole;
  MakeTextRun(&whole);
  pf_run_options old = run;
  old.struct_size = 56;
  old.on_step = nullptr;  // beyond the 56 bytes: not read either way
  old.checkpoint_dir = nullptr;
  old.checkpoint_every = 0;
  result.struct_size = 72;
  result.stopped = 12345;
  ASSERT_PF_OK(pf_trainer_run(whole.trainer, &old, &result));
  EXPECT_EQ(result.stopped, 12345);
  EXPECT_EQ(result.step, 7);
  result.struct_size = sizeof(result);

  TextRun rest;
  MakeTextRun(&rest);
  ASSERT_PF_OK(pf_trainer_load_checkpoint(rest.trainer, dir.c_str()));
  pf_run_options more;
  pf_run_options_init(&more);
  more.steps = 4;
  ASSERT_PF_OK(pf_trainer_run(rest.trainer, &more, &result));
  EXPECT_EQ(result.step, 7);
  EXPECT_EQ(Checksum(rest.trainer), Checksum(whole.trainer));
}

TEST(RunApi, StepResultsCarryTheScheduledRateAndTheBubble) {
  TextRun r;
  MakeTextRun(&r);
  double rates[4];
  for (int step = 0; step < 4; ++step) {
    pf_step_result s;
    s.struct_size = sizeof(s);
    ASSERT_PF_OK(pf_trainer_step_from_loader(r.trainer, &s));
    rates[step] = s.lr;
    EXPECT_GT(s.bubble_rate, 0.0);
    EXPECT_LT(s.bubble_rate, 1.0);
  }
  // Warm-up 2 steps to 0.01, then cosine over 6 steps to 1e-4 (float rates).
  EXPECT_FLOAT_EQ(rates[0], 0.005f);
  EXPECT_FLOAT_EQ(rates[1], 0.01f);
  EXPECT_FLOAT_EQ(rates[2], 0.01f);
  EXPECT_FLOAT_EQ(rates[3], static_cast<float>(1e-4 + (0.01 - 1e-4) * (1 + std::cos(M_PI / 6)) / 2));
  // An older caller's pf_step_result (without lr) still works.
  pf_step_result old;
  old.struct_size = offsetof(pf_step_result, lr);
  EXPECT_PF_OK(pf_trainer_step_from_loader(r.trainer, &old));
}

// A pipelined trainer on `model` with these layers per stage; checks pf_trainer_partition reports
// them. The caller destroys it.
pf_trainer* TrainerWithPartition(pf_model* model, const char* schedule, const std::vector<int32_t>& counts) {
  pf_trainer_options o;
  pf_trainer_options_init(&o);
  o.schedule = schedule;
  o.ranks = static_cast<int32_t>(counts.size());
  o.layers_per_stage = counts.data();
  o.num_layers_per_stage = counts.size();
  pf_trainer* trainer = nullptr;
  EXPECT_PF_OK(pf_trainer_create(model, &o, &trainer));
  if (trainer == nullptr) return nullptr;
  size_t stages = 0;
  EXPECT_PF_OK(pf_trainer_partition(trainer, nullptr, 0, &stages));
  std::vector<int32_t> used(stages);
  EXPECT_PF_OK(pf_trainer_partition(trainer, used.data(), used.size(), &stages));
  EXPECT_EQ(used, counts) << schedule;
  return trainer;
}

TEST(RunApi, PartitionsAndTheBalancedPartitioner) {
  pf_model* model = pftest::MakeDeepMlp();  // 7 top-level layers
  std::vector<float> x(4 * pftest::kFeatures, 0.5f);
  std::vector<int32_t> y = {0, 1, 2, 3};
  const int64_t xs[] = {4, pftest::kFeatures}, ys[] = {4};
  pf_tensor_view in{x.data(), PF_DTYPE_F32, PF_DEVICE_CPU, 0, 2, xs, nullptr};
  pf_tensor_view tg{y.data(), PF_DTYPE_I32, PF_DEVICE_CPU, 0, 1, ys, nullptr};
  int32_t counts[3] = {0, 0, 0};
  ASSERT_PF_OK(pf_model_partition_balanced(model, &in, &tg, 3, counts));
  EXPECT_EQ(counts[0] + counts[1] + counts[2], 7);
  for (int32_t c : counts) EXPECT_GE(c, 1);
  EXPECT_PF_ERROR(pf_model_partition_balanced(model, &in, &tg, 9, counts), PF_INVALID_ARGUMENT, "num_stages");

  pf_trainer* trainer = TrainerWithPartition(model, "gpipe", {counts[0], counts[1], counts[2]});
  ASSERT_NE(trainer, nullptr);
  int32_t used[3];
  size_t stages = 0;
  EXPECT_PF_ERROR(pf_trainer_partition(trainer, used, 2, &stages), PF_INVALID_ARGUMENT, "capacity");
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
}

// The split by parameter count against every contiguous split, counted from the MLP's shapes
// here: the smallest largest-stage count, ties to the earliest boundaries (the smallest counts in
// stage order).
std::vector<int32_t> FewestParametersSplit(const std::vector<int64_t>& layer_params, int stages) {
  const int layers = static_cast<int>(layer_params.size());
  std::vector<int32_t> best, counts(static_cast<size_t>(stages));
  int64_t best_max = -1;
  std::function<void(int, int, int64_t)> place = [&](int stage, int first, int64_t largest) {
    if (stage == stages - 1) {
      int64_t sum = 0;
      for (int l = first; l < layers; ++l) sum += layer_params[static_cast<size_t>(l)];
      counts[static_cast<size_t>(stage)] = layers - first;
      if (best_max < 0 || std::max(largest, sum) < best_max) {
        best_max = std::max(largest, sum);
        best = counts;
      }
      return;
    }
    int64_t sum = 0;
    for (int end = first + 1; end <= layers - (stages - 1 - stage); ++end) {
      sum += layer_params[static_cast<size_t>(end - 1)];
      counts[static_cast<size_t>(stage)] = end - first;
      place(stage + 1, end, std::max(largest, sum));
    }
  };
  place(0, 0, 0);
  return best;
}

TEST(RunApi, PartitionByParametersBalancesParameterCounts) {
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  const int64_t hidden[] = {64, 8, 8};
  config.input_dim = pftest::kFeatures;
  config.hidden = hidden;
  config.num_hidden = 3;
  config.classes = pftest::kClasses;
  pf_model* model = nullptr;
  ASSERT_PF_OK(pf_model_create_mlp(&config, &model));
  // Linear, activation, Linear, activation, Linear, activation, Linear.
  const std::vector<int64_t> params = {(pftest::kFeatures + 1) * 64, 0, 65 * 8, 0, 9 * 8, 0, 9 * pftest::kClasses};
  for (int stages = 1; stages <= 7; ++stages) {
    std::vector<int32_t> counts(static_cast<size_t>(stages), 0);
    ASSERT_PF_OK(pf_model_partition_by_parameters(model, stages, counts.data()));
    EXPECT_EQ(counts, FewestParametersSplit(params, stages)) << stages << " stages";
  }
  int32_t two[2] = {0, 0};
  ASSERT_PF_OK(pf_model_partition_by_parameters(model, 2, two));
  EXPECT_EQ(two[0], 1);  // the even split would be 4 + 3: 1096 parameters on the first stage
  EXPECT_PF_ERROR(pf_model_partition_by_parameters(model, 8, two), PF_INVALID_ARGUMENT, "num_stages is 8");
  EXPECT_PF_ERROR(pf_model_partition_by_parameters(model, 0, two), PF_INVALID_ARGUMENT, "num_stages");
  EXPECT_PF_ERROR(pf_model_partition_by_parameters(model, 2, nullptr), PF_INVALID_ARGUMENT, "layers_per_stage");
  EXPECT_PF_ERROR(pf_model_partition_by_parameters(nullptr, 2, two), PF_INVALID_ARGUMENT, "model");

  pf_trainer_destroy(TrainerWithPartition(model, "1f1b", {two[0], two[1]}));
  pf_model_destroy(model);
}

// A headerless nanoGPT file of uint16 tokens.
std::string WriteTokens(const std::string& name, const std::vector<uint16_t>& tokens) {
  const std::string path = Dir("capi_tokens") + "-" + name + ".bin";
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  return path;
}

// TextData's windows (2 rows of 16 tokens, a tenth held out) of a token file.
pf_builtin_data_options TokenData(const char* path, int64_t vocab, int held_out) {
  pf_builtin_data_options d = TextData(held_out);
  d.kind = PF_DATA_TOKEN_FILE;
  d.path = path;
  d.vocab = vocab;
  return d;
}

// What micro-batch `position` of a TokenData loader holds: int32 inputs and targets, 2 x 16 each.
void Pull(const pf_data_loader& loader, int64_t position, std::vector<int32_t>* inputs,
          std::vector<int32_t>* targets) {
  pf_micro_batch batch{};
  batch.struct_size = sizeof(batch);
  ASSERT_PF_OK(loader.next(loader.user_data, position, &batch));
  ASSERT_EQ(batch.inputs.dtype, PF_DTYPE_I32);
  ASSERT_EQ(batch.inputs.ndim, 2);
  ASSERT_EQ(batch.inputs.shape[0], 2);
  ASSERT_EQ(batch.inputs.shape[1], 16);
  const auto* in = static_cast<const int32_t*>(batch.inputs.data);
  const auto* tg = static_cast<const int32_t*>(batch.targets.data);
  inputs->assign(in, in + 32);
  targets->assign(tg, tg + 32);
}

// A one-block GPT of `vocab` tokens and 16 positions (micro_batches per step) training on `loader`,
// which it takes over.
void MakeTokenRun(TextRun* run, int64_t vocab, int micro_batches, const pf_data_loader& loader) {
  const std::string json = R"({"preset": "gpt", "seq_len": 16, "d_model": 8, "heads": 2, "layers": 1, "vocab": )" +
                           std::to_string(vocab) + "}";
  ASSERT_PF_OK(pf_model_create_from_json(json.c_str(), &run->model));
  const pf_trainer_options o = pftest::Options(micro_batches);
  ASSERT_PF_OK(pf_trainer_create(run->model, &o, &run->trainer));
  ASSERT_PF_OK(pf_trainer_set_data_loader(run->trainer, &loader));
}

// Since 0.17: PF_DATA_TOKEN_FILE serves windows of seq_len + 1 tokens of the file (token i is i
// here, so each row must be a run of consecutive values), the training windows in the first 90 %
// and the held-out ones in the last 10 %; info is the vocabulary and seq_len; a GPT trains on it.
TEST(RunApi, TheTokenFileLoaderServesWindowsOfTheFile) {
  std::vector<uint16_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>(i);
  const std::string path = WriteTokens("counting", tokens);
  for (int held_out : {0, 1}) {
    SCOPED_TRACE(held_out ? "held-out" : "training");
    pf_builtin_data_options d = TokenData(path.c_str(), 200, held_out);
    pf_data_loader loader{};
    int64_t info[2] = {0, 0};
    ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, info));
    EXPECT_EQ(info[0], 200);
    EXPECT_EQ(info[1], 16);
    std::vector<int32_t> first, inputs, targets;
    for (int64_t position = 0; position < 4; ++position) {
      Pull(loader, position, &inputs, &targets);
      for (int r = 0; r < 2; ++r) {
        const int32_t start = inputs[r * 16];
        EXPECT_GE(start, held_out ? 180 : 0);
        EXPECT_LE(start + 16, held_out ? 199 : 179) << "the window's last target is outside the split";
        for (int t = 0; t < 16; ++t) {
          EXPECT_EQ(inputs[r * 16 + t], start + t);
          EXPECT_EQ(targets[r * 16 + t], start + t + 1);
        }
      }
      if (position == 0) first = inputs;
    }
    Pull(loader, 0, &inputs, &targets);  // a position served again is the same micro-batch
    EXPECT_EQ(inputs, first);
    loader.destroy(loader.user_data);
  }

  pf_data_loader train{};
  pf_builtin_data_options d = TokenData(path.c_str(), 200, 0);
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &train, nullptr));
  TextRun run;
  MakeTokenRun(&run, 200, 3, train);
  pf_step_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, &r));
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_EQ(r.tokens, 3 * 2 * 16);
}

// The vocabulary is required and checked: a token >= vocab fails its window (naming the file, the
// token's index and value) and the step that pulls it (PF_CALLBACK_ERROR, the trainer unchanged);
// a 0.5-size struct, without vocab, is refused for a token file and still serves char text.
TEST(RunApi, TheTokenFileLoaderRefusesTokensOutsideTheVocabulary) {
  const std::string path = WriteTokens("fifties", std::vector<uint16_t>(64, 50));
  pf_data_loader loader{};
  pf_builtin_data_options d = TokenData(path.c_str(), 50, 0);
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, nullptr));
  pf_micro_batch batch{};
  batch.struct_size = sizeof(batch);
  EXPECT_PF_ERROR(loader.next(loader.user_data, 0, &batch), PF_INVALID_ARGUMENT, path.c_str(),
                  "is 50, outside the model's vocabulary of 50");
  {
    TextRun run;
    MakeTokenRun(&run, 50, 1, loader);
    const std::string before = Checksum(run.trainer);
    EXPECT_PF_ERROR(pf_trainer_step_from_loader(run.trainer, nullptr), PF_CALLBACK_ERROR, path.c_str(),
                    "INVALID_ARGUMENT");
    EXPECT_EQ(Checksum(run.trainer), before);
  }

  d.vocab = 0;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->vocab is 0");
  d.vocab = -3;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->vocab is -3");
  d.vocab = 50;
  d.path = nullptr;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->path");
  d.path = "/nonexistent/train.bin";
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_NOT_FOUND, "/nonexistent/train.bin");
  const std::string odd = WriteTokens("odd", {1, 2, 3});
  std::filesystem::resize_file(odd, 5);
  d.path = odd.c_str();
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_DATA_LOSS, odd.c_str());
  d.path = path.c_str();
  d.struct_size = 72;  // a 0.5 caller's struct: vocab is past its end, so it reads as 0
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->vocab is 0");
  d = TextData(0);
  d.struct_size = 72;
  int64_t info[2] = {0, 0};
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, info));
  EXPECT_EQ(info[1], 16);
  loader.destroy(loader.user_data);
}

// CIFAR-10 records (a label byte, 3072 pixel bytes) with these ids: label id % 10, pixel k byte
// (id + k) % 256, so a row's first feature names its record.
std::string WriteCifar10(const std::string& path, const std::vector<int>& ids) {
  std::string bytes;
  for (int id : ids) {
    bytes.push_back(static_cast<char>(id % 10));
    for (int k = 0; k < 3072; ++k) bytes.push_back(static_cast<char>((id + k) % 256));
  }
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Micro-batch `position` of a CIFAR-10 loader: the ids of its rows, each row checked exactly
// (pixel byte / 255 in the file's order, the label).
std::vector<int> PullImages(const pf_data_loader& loader, int64_t position, int64_t rows) {
  pf_micro_batch batch{};
  batch.struct_size = sizeof(batch);
  std::vector<int> ids;
  EXPECT_PF_OK(loader.next(loader.user_data, position, &batch));
  EXPECT_EQ(batch.inputs.dtype, PF_DTYPE_F32);
  EXPECT_EQ(batch.targets.dtype, PF_DTYPE_I32);
  EXPECT_EQ(batch.inputs.ndim, 2);
  if (batch.inputs.ndim != 2 || batch.inputs.shape[0] != rows || batch.inputs.shape[1] != 3072) {
    ADD_FAILURE() << "not a [" << rows << ", 3072] batch";
    return ids;
  }
  const auto* x = static_cast<const float*>(batch.inputs.data);
  const auto* y = static_cast<const int32_t*>(batch.targets.data);
  for (int64_t r = 0; r < rows; ++r) {
    const int id = static_cast<int>(x[r * 3072] * 255.0f + 0.5f);
    int wrong = 0;
    for (int k = 0; k < 3072; ++k) wrong += x[r * 3072 + k] != static_cast<float>((id + k) % 256) / 255.0f;
    EXPECT_EQ(wrong, 0) << "record " << id;
    EXPECT_EQ(y[r], id % 10) << "record " << id;
    ids.push_back(id);
  }
  return ids;
}

// Since 0.18: PF_DATA_CIFAR10 serves an image a row (3072 pixels / 255, the label as target), the
// training records shuffled and a file's last held_out_fraction held out, or a folder's five
// training files and its test_batch.bin; info is 3072 features and 10 classes; an MLP of input
// width 3072 trains on it; a damaged file is PF_DATA_LOSS naming it, a bad label fails the step.
TEST(RunApi, TheCifar10LoaderServesImagesOfTheFile) {
  const std::string dir = Dir("capi_cifar10");
  fs::create_directories(dir);
  std::vector<int> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(i);
  const std::string file = WriteCifar10(dir + "/ten.bin", ten);
  pf_builtin_data_options d;
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_CIFAR10;
  d.path = file.c_str();
  d.rows = 2;
  d.seed = 3;
  d.held_out_fraction = 0.2;
  std::vector<int> seen;
  for (int held_out : {0, 1}) {
    SCOPED_TRACE(held_out ? "held-out" : "training");
    d.held_out = held_out;
    pf_data_loader loader{};
    int64_t info[2] = {0, 0};
    ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, info));
    EXPECT_EQ(info[0], 3072);
    EXPECT_EQ(info[1], 10);
    const int64_t batches = held_out ? 1 : 4;  // 2 held out, 8 for training
    for (int64_t p = 0; p < batches; ++p)
      for (int id : PullImages(loader, p, 2)) seen.push_back(id);
    EXPECT_EQ(PullImages(loader, batches, 2), PullImages(loader, 0, 2)) << "the stream wraps";
    loader.destroy(loader.user_data);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, ten) << "each record in one split once";

  // A folder: the training files and test_batch.bin held out (no fraction of it).
  for (int n = 1; n <= 5; ++n) WriteCifar10(dir + "/data_batch_" + std::to_string(n) + ".bin", {10 * n, 10 * n + 1});
  WriteCifar10(dir + "/test_batch.bin", {100, 101, 102});
  d.path = dir.c_str();
  d.held_out = 1;
  pf_data_loader loader{};
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "held_out_fraction",
                  "test_batch.bin");
  d.held_out_fraction = 0;
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, nullptr));
  EXPECT_EQ(PullImages(loader, 0, 2), (std::vector<int>{100, 101}));
  EXPECT_EQ(PullImages(loader, 1, 1), (std::vector<int>{102}));  // the remainder
  loader.destroy(loader.user_data);

  // An MLP of input width 3072 trains on the folder's training files.
  d.held_out = 0;
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, nullptr));
  pf_mlp_config config;
  pf_mlp_config_init(&config);
  const int64_t hidden[] = {8};
  config.input_dim = 3072;
  config.hidden = hidden;
  config.num_hidden = 1;
  config.classes = 10;
  TextRun run;
  ASSERT_PF_OK(pf_model_create_mlp(&config, &run.model));
  const pf_trainer_options o = pftest::Options(2);
  ASSERT_PF_OK(pf_trainer_create(run.model, &o, &run.trainer));
  ASSERT_PF_OK(pf_trainer_set_data_loader(run.trainer, &loader));
  pf_step_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_trainer_step_from_loader(run.trainer, &r));
  EXPECT_TRUE(std::isfinite(r.loss));

  // Damage: a size that is no multiple of 3073 bytes, a folder without test_batch.bin, label 10.
  const std::string cut = dir + "/cut.bin";
  fs::copy_file(file, cut);
  fs::resize_file(cut, 3073 * 2 + 7);
  d.path = cut.c_str();
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_DATA_LOSS, cut.c_str(), "6153 bytes");
  fs::remove(dir + "/test_batch.bin");
  d.path = dir.c_str();
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_NOT_FOUND,
                  (dir + "/test_batch.bin").c_str());
  d.path = nullptr;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->path");
  const std::string bad = WriteCifar10(dir + "/label10.bin", {1, 3, 2});
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3073);
    f.put(10);  // record 1's label
  }
  d.path = bad.c_str();
  d.rows = 3;
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, nullptr));
  TextRun bad_run;
  ASSERT_PF_OK(pf_model_create_mlp(&config, &bad_run.model));
  const pf_trainer_options one = pftest::Options(1);
  ASSERT_PF_OK(pf_trainer_create(bad_run.model, &one, &bad_run.trainer));
  ASSERT_PF_OK(pf_trainer_set_data_loader(bad_run.trainer, &loader));
  const std::string before = Checksum(bad_run.trainer);
  EXPECT_PF_ERROR(pf_trainer_step_from_loader(bad_run.trainer, nullptr), PF_CALLBACK_ERROR, bad.c_str(),
                  "record 1 (counting from 0) has label 10");
  EXPECT_EQ(Checksum(bad_run.trainer), before);
}

TEST(RunApi, BadOptionsAndMissingLoadersAreNamed) {
  pf_model* model = pftest::MakeMlp();
  pf_trainer_options o;
  pf_trainer_options_init(&o);
  o.lr_schedule = "cosin";
  pf_trainer* trainer = nullptr;
  EXPECT_PF_ERROR(pf_trainer_create(model, &o, &trainer), PF_INVALID_ARGUMENT, "cosine");
  o.lr_schedule = "cosine";
  EXPECT_PF_ERROR(pf_trainer_create(model, &o, &trainer), PF_INVALID_ARGUMENT, "decay_steps");
  o.lr_schedule = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, &o, &trainer));
  pf_eval_result e;
  e.struct_size = sizeof(e);
  EXPECT_PF_ERROR(pf_trainer_evaluate(trainer, 1, &e), PF_FAILED_PRECONDITION, "pf_trainer_set_eval_loader");
  pf_run_options run;
  pf_run_options_init(&run);
  run.steps = 1;
  EXPECT_PF_ERROR(pf_trainer_run(trainer, &run, nullptr), PF_FAILED_PRECONDITION, "pf_trainer_set_data_loader");

  pf_builtin_data_options d;
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_SYNTHETIC;
  d.features = pftest::kFeatures;
  d.classes = pftest::kClasses;
  pf_data_loader loader{};
  ASSERT_PF_OK(pf_data_loader_create_builtin(&d, &loader, nullptr));
  ASSERT_PF_OK(pf_trainer_set_data_loader(trainer, &loader));
  run.checkpoint_every = 2;
  EXPECT_PF_ERROR(pf_trainer_run(trainer, &run, nullptr), PF_INVALID_ARGUMENT, "options->checkpoint_every",
                  "checkpoint_dir");
  run.checkpoint_every = 0;
  run.eval_every = 1;
  EXPECT_PF_ERROR(pf_trainer_run(trainer, &run, nullptr), PF_FAILED_PRECONDITION, "eval loader");
  run.eval_every = 0;
  run.steps = 3;
  pf_run_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_trainer_run(trainer, &run, &r));
  EXPECT_EQ(r.step, 3);
  EXPECT_TRUE(std::isnan(r.eval_loss));
  EXPECT_EQ(r.last_checkpoint, nullptr);

  d.kind = 9;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->kind");
  d.kind = PF_DATA_CSV;
  d.path = "/nonexistent/digits.csv";
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_NOT_FOUND, "/nonexistent/digits.csv");
  d.kind = PF_DATA_CHAR_TEXT;
  d.path = nullptr;
  d.held_out = 1;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "held_out_fraction");
  // Sizes from the options are checked before a batch is allocated (they failed an allocation);
  // a symbolic link loop as the text path names the path and the reason (it was PF_INTERNAL).
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_SYNTHETIC;
  d.rows = int64_t{1} << 40;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT,
                  "options->rows is 1099511627776: expected at most 2147483647");
  d.rows = int64_t{1} << 20;
  d.features = int64_t{1} << 40;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT,
                  "options->features is 1099511627776: expected 1 to 2147483647");
  d.features = int64_t{1} << 30;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT,
                  "options->rows x options->features is 1048576 x 1073741824: one batch would hold "
                  "1125899906842624 4-byte values");
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_CHAR_TEXT;
  d.seq_len = int64_t{1} << 40;
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_INVALID_ARGUMENT, "options->seq_len is");
  const std::string loop = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/loop";
  std::filesystem::remove(loop);
  std::filesystem::create_symlink(loop, loop);
  pf_builtin_data_options_init(&d);
  d.kind = PF_DATA_CHAR_TEXT;
  d.path = loop.c_str();
  EXPECT_PF_ERROR(pf_data_loader_create_builtin(&d, &loader, nullptr), PF_IO_ERROR, loop.c_str(),
                  "Too many levels of symbolic links");
  std::filesystem::remove(loop);
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
}

}  // namespace
