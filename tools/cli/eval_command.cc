#include "tools/cli/eval_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/core/output_file.h"
#include "runtime/core/error.h"
#include "runtime/data/cifar10.h"
#include "runtime/data/token_file.h"
#include "runtime/interop/hf_models.h"
#include "runtime/models/builders.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/run/make_trainer.h"
#include "runtime/run/training_config.h"
#include "runtime/train/stage.h"
#include "tools/cli/cli.h"
#include "tools/cli/train_config.h"
#include "tools/cli/train_config_of.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {

namespace {

constexpr int64_t kMaxLogitsBytes = int64_t{1} << 30;

// The model's output for every window of `windows` (one forward per batch through the model as one
// stage, in this process), as the safetensors bytes of "logits" [windows, S, vocab].
std::string window_logits(const Model& model, ConsecutiveWindows& windows, int64_t seq_len) {
  const int64_t vocab = model.input_spec().classes;
  const Stage whole(model, 0, 1, 0, static_cast<int>(model.layers().size()));
  Tensor all = Tensor::empty({windows.windows(), seq_len, vocab});
  int64_t row = 0;
  for (int64_t b = 0; b < windows.batches(); ++b) {
    std::vector<SavedContext> contexts;
    const Tensor x = whole.forward(windows.batch_at(b).inputs, contexts);
    PF_INTERNAL_CHECK(x.numel() == x.dim(0) * seq_len * vocab, "eval --logits: the model's output ",
                      shape_to_string(x.shape()), " is not [rows, ", seq_len, ", ", vocab, "]");
    all.slice_rows(row, row + x.dim(0)).copy_from(x.reshape({x.dim(0), seq_len, vocab}));
    row += x.dim(0);
  }
  return encode_safetensors({{"logits", &all}}, {{"format", "pt"}});
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Mean cross-entropy of a token model over a whole token file (consecutive windows of --seq-len + 1), "
              "or of an image classifier over CIFAR-10's test images");
  add_model_options(cmd, a.model);
  cmd->get_option("--seq-len")->description("tokens per window, S (default: the model's positions)")->default_str("");
  cmd->add_option("--resume", a.resume,
                  "the weights of this checkpoint (file, sharded folder or series folder: its newest), and its "
                  "model unless model options are given");
  cmd->get_option("--init-from")->description(
      "a Hugging Face Transformers folder (config.json and model.safetensors; Llama): its model and weights");
  cmd->add_option("--batch-size", a.batch_size, "windows (images) per forward pass")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--seed", a.model.seed, "seed of the initial parameters (without --resume)")->capture_default_str();
  cmd->add_option("--logits", a.logits,
                  "also write every window's logits to this safetensors file (tensor \"logits\", f32 [windows, S, "
                  "vocab]; at most 1 GiB)");
  cmd->add_flag("--json", a.json, "print one JSON object");
  return cmd;
}

void note_eval_options(const CLI::App& cmd, EvalArgs& a) {
  // --seq-len is the windows' length here; the others describe a model.
  for (const std::string& option : model_options_given(cmd))
    if (option != "--seq-len") a.model_given = true;
  a.seq_len_given = cmd.get_option("--seq-len")->count() > 0;
}

namespace {

// What eval reads: the consecutive windows of a token file, or CIFAR-10's test images; served one
// batch at a time from position 0.
struct EvalData {
  std::unique_ptr<ConsecutiveWindows> windows;  // a token file
  std::shared_ptr<const TokenFile> file;
  std::unique_ptr<Cifar10Dataset> images;       // CIFAR-10
  std::unique_ptr<DataSource> image_batches;
  DataSource& source() { return windows ? static_cast<DataSource&>(*windows) : *image_batches; }
  int64_t batches() const { return windows ? windows->batches() : images->held_out_batches(); }
};

// CIFAR-10's test images for `model`: a folder's test_batch.bin, or every record of one file.
void open_images(const EvalArgs& a, const std::string& path, const Model& model, EvalData* data) {
  const InputSpec& in = model.input_spec();
  PF_CHECK_ARG(in.kind == InputSpec::Kind::kFeatures, "--data ", kCifar10Prefix, path,
               ": CIFAR-10 images feed a model with feature input (--model mlp --features 3072, or a model file's)");
  PF_CHECK_ARG(in.features == Cifar10Dataset::kFeatures, "--data ", kCifar10Prefix, path, ": CIFAR-10 images are ",
               Cifar10Dataset::kFeatures, " values each (3 x 32 x 32), but the model's input width is ", in.features);
  PF_CHECK_ARG(in.classes >= Cifar10Dataset::kClasses, "--data ", kCifar10Prefix, path, ": CIFAR-10 has ",
               Cifar10Dataset::kClasses, " classes, but the model has ", in.classes);
  PF_CHECK_ARG(!a.seq_len_given && a.logits.empty(), "--seq-len and --logits apply to token files");
  Cifar10Options o;
  o.path = path;
  o.rows = a.batch_size;
  data->images = std::make_unique<Cifar10Dataset>(Cifar10Dataset::load_test_set(o));
  data->image_batches = data->images->held_out_source();
}

}  // namespace

int run_eval(const EvalArgs& a) {
  std::string checkpoint;
  std::shared_ptr<Model> model;
  std::unique_ptr<Trainer> trainer;
  EvalData data;
  std::string token_file, images;
  int64_t seq_len = 0;  // S: --seq-len, or the model's positions
  try {
    PF_CHECK_ARG(a.model.init_from.empty() || a.resume.empty(), "--init-from and --resume both give the weights; give one");
    token_file = token_file_of(a.model.data, "--data");
    images = cifar10_path_of(a.model.data, "--data");
    PF_CHECK_ARG(!token_file.empty() || !images.empty(),
                 "eval reads a token file: --data tokens:FILE, or CIFAR-10 images: --data cifar10:PATH");
    if (!a.resume.empty()) checkpoint = resolve_checkpoint(a.resume);
    model = model_with_weights_of(a.model, checkpoint, a.model_given, "--resume " + a.resume);
    const InputSpec& in = model->input_spec();
    if (!images.empty()) {
      open_images(a, images, *model, &data);
    } else {
      PF_CHECK_ARG(in.kind == InputSpec::Kind::kTokens,
                   "eval needs a token model (GPT or a model file with token input)");
      seq_len = a.seq_len_given ? a.model.seq_len : in.seq_len;
      PF_CHECK_ARG(seq_len <= in.seq_len, "--seq-len ", seq_len, " is longer than the model's ", in.seq_len,
                   " positions");
      if (!a.logits.empty()) check_output_path(a.logits, "--logits");
      data.file = TokenFile::open(token_file);
      data.windows = std::make_unique<ConsecutiveWindows>(data.file, seq_len, a.batch_size,
                                                          std::min(in.vocab, in.classes));
      if (!a.logits.empty()) {
        const double bytes = 4.0 * static_cast<double>(data.windows->windows()) * static_cast<double>(seq_len) *
                             static_cast<double>(in.classes);  // in double: no overflow
        PF_CHECK_ARG(bytes <= static_cast<double>(kMaxLogitsBytes), "--logits: ", data.windows->windows(),
                     " windows x ", seq_len, " positions x ", in.classes,
                     " logits would take more than the limit of 1 GiB; evaluate a shorter file");
      }
    }
    trainer = trainer_with_weights(model, a.model.seed, checkpoint, a.model.init_from);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kNotFound &&
        e.code() != ErrorCode::kDataLoss)
      throw;
    std::cerr << "pipeforge eval: " << e.what() << "\n";
    return kExitUsage;
  }

  // Each batch's loss is the mean over its targets (rows x S positions, or rows): weighted by its
  // rows, the sum over batches is the mean over every target.
  const auto start = std::chrono::steady_clock::now();
  double weighted = 0.0;
  int64_t rows = 0, correct_targets = 0;
  for (int64_t b = 0; b < data.batches(); ++b) {
    const EvalResult r = trainer->evaluate(data.source(), 1);
    weighted += r.loss * static_cast<double>(r.samples);
    correct_targets += static_cast<int64_t>(std::llround(r.accuracy * static_cast<double>(r.targets)));
    rows += r.samples;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!a.logits.empty()) write_output_file(a.logits, window_logits(*model, *data.windows, seq_len), "--logits");
  const double loss = weighted / static_cast<double>(rows);
  const int64_t targets = data.windows ? rows * seq_len : rows;
  const double accuracy = static_cast<double>(correct_targets) / static_cast<double>(targets);
  const std::string weights = checkpoint.empty() ? "" : ", weights of " + checkpoint;
  if (a.json) {
    nlohmann::ordered_json out;
    out["format"] = "pipeforge.eval/1";
    out["loss"] = loss;
    out["accuracy"] = accuracy;
    if (data.windows) {
      out["windows"] = rows;
      out["seq_len"] = seq_len;
      out["tokens_scored"] = targets;
      out["file_tokens"] = data.file->size();
      out["file_format"] = data.file->format_name();
      out["data"] = token_file;
    } else {
      out["images"] = rows;
      out["file_format"] = "CIFAR-10";
      out["data"] = images;
      out["data_files"] = data.images->files();
    }
    out["checkpoint"] = checkpoint.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(checkpoint);
    out["seconds"] = seconds;
    std::cout << out.dump(2) << std::endl;
  } else {
    if (data.windows) {
      std::cout << "eval: " << token_file << ", " << rows << " windows of " << seq_len + 1 << " tokens (" << targets
                << " targets)" << weights << "\n";
    } else {
      std::cout << "eval: " << data.images->files().front() << ", " << rows << " CIFAR-10 images" << weights << "\n";
    }
    std::cout << "loss " << loss << ", accuracy " << accuracy << " (" << seconds << " s)\n";
  }
  return kExitOk;
}

}  // namespace pf::cli
