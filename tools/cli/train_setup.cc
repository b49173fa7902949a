#include "tools/cli/train_setup.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/cifar10.h"
#include "runtime/data/csv_classification.h"
#include "runtime/data/synthetic_classification.h"
#include "runtime/data/token_file.h"
#include "runtime/interop/hf_models.h"
#include "runtime/models/builders.h"
#include "runtime/planner/tensor_parallel_profile.h"
#include "runtime/run/make_trainer.h"
#include "runtime/run/training_config.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "tools/cli/train_config_of.h"

namespace pf::cli {

namespace {

// --layers when not given: 2, or enough for one top-level layer per stage of the schedule (GPT and
// Llama: blocks + embedding, final norm and head; MLP: a Linear and an activation per hidden layer,
// and the head).
int64_t default_layers(const TrainArgs& a) {
  const int64_t stages = schedule_stages(a);
  return a.model == "mlp" ? std::max<int64_t>(2, stages / 2) : std::max<int64_t>(2, stages - 3);
}
// The share of the text held out: --held-out, or 0.1 when evaluating.
double held_out_fraction(const TrainArgs& a) {
  if (a.held_out >= 0) return a.held_out;
  return a.eval_every > 0 ? 0.1 : 0.0;
}
// A model from --model-file or the config's inline model; null when neither is given.
std::shared_ptr<Model> model_from_json(const TrainArgs& a) {
  if (!a.init_from.empty()) return build_model_from_json(model_json_from_hf_folder(a.init_from));
  if (!a.model_json.empty()) return build_model_from_json_text(a.model_json);
  if (a.model_file.empty()) return nullptr;
  const std::string text = read_input_file(a.model_file, "--model-file", limits::kMaxModelJsonBytes);
  try {
    return build_model_from_json_text(text);
  } catch (const Error& e) {
    throw Error(e.code(), "--model-file '" + a.model_file + "': " + e.what());
  }
}
// "the mlp model", "the model of m.json": model_name(a) with its article.
std::string the_model(const TrainArgs& a) {
  const std::string name = model_name(a);
  return name.rfind("the ", 0) == 0 ? name : "the " + name;
}
// The training data of a token model (character text, or the token file of --data tokens:FILE),
// its held-out split with --eval-every, its vocabulary and what to report about it.
struct TokenData {
  std::unique_ptr<DataSource> train, held_out;
  int64_t vocab = 0;  // the text's distinct bytes, or the vocabulary the token file was checked against
  nlohmann::json description;
};
// `model_vocab`: the vocabulary of the model the data feeds (0: --vocab, or the text's own).
TokenData token_data(const TrainArgs& a, int64_t rows, int64_t seq_len, int64_t model_vocab) {
  TokenData d;
  const bool evaluate = a.eval_every > 0;
  const std::string images = cifar10_path_of(a.data, "--data");
  PF_CHECK_ARG(images.empty(), "--data ", kCifar10Prefix, images, ": CIFAR-10 images feed a model with feature input ",
               "(--model mlp --features 3072, or a model file's), not ", the_model(a));
  const std::string token_file = token_file_of(a.data, "--data");
  if (!token_file.empty()) {
    d.vocab = model_vocab > 0 ? model_vocab : a.vocab;
    PF_CHECK_ARG(d.vocab > 0, "--data tokens:", token_file, " needs --vocab (the vocabulary the tokens were made ",
                 "with, e.g. 50257 for GPT-2's)");
    TokenFileOptions o;
    o.file = token_file;
    o.rows = rows;
    o.seq_len = seq_len;
    o.seed = a.seed;
    o.held_out_fraction = held_out_fraction(a);
    o.vocab = d.vocab;
    auto tokens = std::make_unique<TokenFileDataset>(o);
    d.description = {{"data_files", {token_file}},
                     {"data_format", tokens->file().format_name()},
                     {"data_tokens", tokens->file().size()}};
    if (evaluate) d.held_out = tokens->with_split(DataSplit::kHeldOut);
    d.train = std::move(tokens);
    return d;
  }
  CharTextOptions o;
  o.files = a.data;
  o.rows = rows;
  o.seq_len = seq_len;
  o.seed = a.seed;
  o.held_out_fraction = held_out_fraction(a);
  auto text = std::make_unique<CharTextDataset>(o);
  d.vocab = text->vocab_size();
  const int64_t limit = model_vocab > 0 ? model_vocab : a.vocab;
  PF_CHECK_ARG(limit <= 0 || d.vocab <= limit, "the model's vocabulary (", limit,
               " tokens) is smaller than the text's (", d.vocab, " distinct bytes)");
  if (a.vocab > 0) d.vocab = a.vocab;
  d.description = {{"data_files", text->files()}, {"data_tokens", text->tokens().size()}};
  if (evaluate) d.held_out = text->with_split(DataSplit::kHeldOut);
  d.train = std::move(text);
  return d;
}
std::unique_ptr<SyntheticClassification> synthetic(const TrainArgs& a, int64_t rows, int64_t features,
                                                   int64_t classes, bool held_out) {
  SyntheticClassificationOptions data;
  data.rows = rows;
  data.features = features;
  data.classes = classes;
  data.seed = a.seed;
  data.held_out = held_out;
  return std::make_unique<SyntheticClassification>(data);
}
// What `read` returns; its error prefixed with `option` ("--data: CSV file 'x' ...").
template <typename Read>
auto with_option_name(const std::string& option, Read read) -> decltype(read()) {
  try {
    return read();
  } catch (const Error& e) {
    throw Error(e.code(), option + ": " + e.what());
  }
}
// The data of a model with feature input (the MLP, a model file's): CIFAR-10 images (--data
// cifar10:PATH), a CSV file (--data FILE) or the synthetic task, its held-out split with
// --eval-every, and what to report about it; checked against the model's input width `features`
// and its `classes`.
struct FeatureData {
  std::unique_ptr<DataSource> train, held_out;
  nlohmann::json description = nlohmann::json::object();  // empty for the synthetic task
};
FeatureData feature_data(const TrainArgs& a, int64_t rows, int64_t features, int64_t classes) {
  FeatureData d;
  const bool evaluate = a.eval_every > 0;
  const std::string given_features = a.model == "mlp" && a.model_file.empty() && a.model_json.empty() &&
                                             a.init_from.empty()
                                         ? " (--features)"
                                         : "";
  PF_CHECK_ARG(token_file_of(a.data, "--data").empty(), "--data ", a.data.front(), ": a token file feeds a token ",
               "model (--model gpt or llama, or a model file's), not ", the_model(a));
  if (a.data.empty()) {
    d.train = synthetic(a, rows, features, classes, false);
    if (evaluate) d.held_out = synthetic(a, rows, features, classes, true);
    return d;
  }
  const std::string images = cifar10_path_of(a.data, "--data");
  if (!images.empty()) {
    PF_CHECK_ARG(features == Cifar10Dataset::kFeatures, "--data ", kCifar10Prefix, images, ": CIFAR-10 images are ",
                 Cifar10Dataset::kFeatures, " values each (3 x 32 x 32), but ", the_model(a), "'s input width",
                 given_features, " is ", features);
    PF_CHECK_ARG(classes >= Cifar10Dataset::kClasses, "--data ", kCifar10Prefix, images, ": CIFAR-10 has ",
                 Cifar10Dataset::kClasses, " classes, but ", the_model(a), " has ", classes);
    std::error_code error;
    const bool folder = std::filesystem::is_directory(images, error);
    PF_CHECK_ARG(!folder || a.held_out < 0, "--held-out ", a.held_out, ": the held-out split of CIFAR-10 folder '",
                 images, "' is its test_batch.bin (--held-out applies to one CIFAR-10 file)");
    Cifar10Options o;
    o.path = images;
    o.rows = rows;
    o.held_out_fraction = folder ? 0.0 : held_out_fraction(a);
    o.shuffle_seed = a.seed;
    const Cifar10Dataset data = with_option_name("--data", [&] { return Cifar10Dataset::load(o); });
    d.train = data.training_source();
    if (evaluate) d.held_out = data.held_out_source();
    d.description = {{"data_files", data.files()},
                     {"data_format", "CIFAR-10"},
                     {"data_samples", data.train_size()},
                     {"held_out_samples", data.held_out_size()}};
    return d;
  }
  PF_CHECK_ARG(a.data.size() == 1, "--data: one CSV file feeds ", the_model(a), " (", a.data.size(),
               " files were given)");
  CsvClassificationOptions o;
  o.path = a.data.front();
  o.rows = rows;
  o.held_out_fraction = held_out_fraction(a);
  o.shuffle_seed = a.seed;
  const CsvClassificationDataset data = with_option_name("--data", [&] { return CsvClassificationDataset::load(o); });
  PF_CHECK_ARG(data.features() == features, "--data ", o.path, ": its rows have ", data.features(),
               " features, but ", the_model(a), "'s input width", given_features, " is ", features);
  PF_CHECK_ARG(data.classes() <= classes, "--data ", o.path, ": its labels go up to ", data.classes() - 1,
               ", but ", the_model(a), " has ", classes, " classes");
  d.train = data.training_source();
  if (evaluate) d.held_out = data.held_out_source(rows);
  d.description = {{"data_files", {o.path}},
                   {"data_format", "CSV"},
                   {"data_samples", data.train_size()},
                   {"held_out_samples", data.held_out_size()}};
  return d;
}

// The path after `prefix` of `data` = {"<prefix>PATH"}; "" when no item starts with it.
// kInvalidArgument naming `option` when it comes with other data.
std::string prefixed_path_of(const std::vector<std::string>& data, const char* prefix, const char* what,
                             const std::string& option) {
  for (const std::string& d : data) {
    if (d.rfind(prefix, 0) != 0) continue;
    PF_CHECK_ARG(data.size() == 1, option, " ", d, ": ", what, " the only data of a run (", data.size(),
                 " were given)");
    return d.substr(std::char_traits<char>::length(prefix));
  }
  return "";
}

}  // namespace

std::string token_file_of(const std::vector<std::string>& data, const std::string& option) {
  return prefixed_path_of(data, kTokenFilePrefix, "a token file is", option);
}

std::string cifar10_path_of(const std::vector<std::string>& data, const std::string& option) {
  return prefixed_path_of(data, kCifar10Prefix, "CIFAR-10 images are", option);
}

// The model stages of the schedule the arguments ask for (1 without one; one pipeline's with two).
int schedule_stages(const TrainArgs& a) {
  if (!a.schedule_file.empty()) return sched::read_schedule_file(a.schedule_file).stages_per_pipeline();
  if (a.schedule.empty()) return 1;
  sched::ScheduleRequest request;
  request.name = a.schedule;
  request.ranks = a.stages;
  request.micro_batches = a.micro_batches;
  request.chunks = a.chunks;
  request.seq_slices = a.seq_slices;
  return sched::make_schedule(request).stages_per_pipeline();
}

void resolve_train_defaults(TrainArgs& a) {
  if (a.micro_batches != 0) return;
  if (!a.schedule_file.empty()) {
    const sched::Schedule s = sched::read_schedule_file(a.schedule_file);
    a.micro_batches = s.num_micro_batches / std::max(1, s.seq_slices);
    return;
  }
  a.micro_batches = default_micro_batches(a.schedule.empty() ? 1 : a.stages, a.batch_size);
}

// The ranks of the schedule the arguments ask for.
int schedule_ranks(const TrainArgs& a) {
  if (!a.schedule_file.empty()) return sched::read_schedule_file(a.schedule_file).num_ranks();
  return a.stages;
}
// The built-in token model (--model gpt or llama) of the options with vocabulary `vocab`; its
// description (sizes) added to *description.
std::shared_ptr<Model> token_model(const TrainArgs& a, int64_t vocab, nlohmann::json* description) {
  const int64_t layers = a.layers < 0 ? default_layers(a) : a.layers;
  *description = {{"vocab", vocab}, {"seq_len", a.seq_len}, {"d_model", a.d_model}, {"heads", a.heads}, {"layers", layers}};
  (*description)["mlp_hidden"] = a.hidden < 0 ? 0 : a.hidden;
  if (a.tie_embeddings) (*description)["tie_embeddings"] = true;
  if (a.model == "llama") {
    LlamaConfig config;
    config.vocab = vocab;
    config.seq_len = a.seq_len;
    config.d_model = a.d_model;
    config.heads = a.heads;
    config.kv_heads = a.kv_heads < 0 ? a.heads : a.kv_heads;
    config.layers = layers;
    config.mlp_hidden = a.hidden < 0 ? 0 : a.hidden;
    config.tie_embeddings = a.tie_embeddings;
    (*description)["kv_heads"] = config.kv_heads;
    return build_llama(config);
  }
  GptConfig config;
  config.vocab = vocab;
  config.seq_len = a.seq_len;
  config.d_model = a.d_model;
  config.heads = a.heads;
  config.layers = layers;
  config.mlp_hidden = a.hidden < 0 ? 0 : a.hidden;
  config.tie_embeddings = a.tie_embeddings;
  return build_gpt(config);
}

Setup make_setup(const TrainArgs& a) {
  Setup s;
  const int64_t rows = a.batch_size / a.micro_batches;
  if (std::shared_ptr<Model> model = model_from_json(a)) {
    const InputSpec& in = model->input_spec();
    if (in.kind == InputSpec::Kind::kTokens) {
      TokenData data = token_data(a, rows, in.seq_len, std::min(in.vocab, in.classes));
      s.description = {{"vocab", in.vocab}, {"seq_len", in.seq_len}};
      s.description.update(data.description);
      s.data = std::move(data.train);
      s.held_out = std::move(data.held_out);
    } else {
      FeatureData data = feature_data(a, rows, in.features, in.classes);
      s.description = {{"features", in.features}, {"classes", in.classes}};
      s.description.update(data.description);
      s.data = std::move(data.train);
      s.held_out = std::move(data.held_out);
    }
    s.description["layers"] = model->layers().size();
    s.model = std::move(model);
    return s;
  }
  const int64_t layers = a.layers < 0 ? default_layers(a) : a.layers;
  if (a.model == "mlp") {
    FeatureData data = feature_data(a, rows, a.features, a.classes);
    s.data = std::move(data.train);
    s.held_out = std::move(data.held_out);
    MlpConfig config;
    config.input_dim = a.features;
    config.classes = a.classes;
    config.hidden.assign(static_cast<size_t>(layers), a.hidden < 0 ? 64 : a.hidden);
    s.model = build_mlp(config);
    s.description = {{"features", config.input_dim}, {"hidden", config.hidden}, {"classes", config.classes}};
    s.description.update(data.description);
  } else {
    TokenData data = token_data(a, rows, a.seq_len, 0);
    s.model = token_model(a, data.vocab, &s.description);
    s.description.update(data.description);
    s.data = std::move(data.train);
    s.held_out = std::move(data.held_out);
  }
  return s;
}

std::shared_ptr<Model> model_with_weights_of(const TrainArgs& a, const std::string& checkpoint, bool model_given,
                                             const std::string& option) {
  if (!checkpoint.empty() && !model_given) {
    const nlohmann::json header = checkpoint_header(checkpoint);
    PF_CHECK_ARG(header.contains("model") && header["model"].is_object(), option,
                 ": the checkpoint does not describe its model; give the model options it was trained with");
    return build_model_from_json_text(header["model"].dump());
  }
  if (std::shared_ptr<Model> described = model_from_json(a)) return described;  // no data needed
  if (a.model != "mlp" && a.vocab > 0) {  // the vocabulary given: no data needed either
    nlohmann::json description;
    return token_model(a, a.vocab, &description);
  }
  TrainArgs t = a;
  t.batch_size = 1;
  t.micro_batches = 1;
  t.eval_every = 0;
  return make_setup(t).model;
}

std::unique_ptr<Trainer> trainer_with_weights(std::shared_ptr<Model> model, uint64_t seed,
                                              const std::string& checkpoint, const std::string& init_from) {
  TrainingConfig config;
  config.base.seed = seed;
  TrainerInputs inputs;
  inputs.names = cli_option_name;
  std::unique_ptr<Trainer> trainer = make_trainer(model, config, inputs);
  if (!checkpoint.empty()) load_trainer_checkpoint(*trainer, checkpoint);
  if (!init_from.empty()) load_hf_weights(*model, trainer->local_parameters(), init_from);
  return trainer;
}

// "gpt model", "the model of m.json".
std::string model_name(const TrainArgs& a) {
  if (!a.model_file.empty()) return "the model of " + a.model_file;
  if (!a.model_json.empty()) return "the config's model";
  return a.model + " model";
}

// The learning-rate schedule of the arguments.
LrSchedule lr_schedule(const TrainArgs& a) {
  LrSchedule s;
  s.kind = parse_lr_schedule_kind(a.lr_schedule);
  s.warmup_steps = a.warmup_steps;
  if (s.kind != LrSchedule::Kind::kConstant) {
    s.decay_steps = a.decay_steps > 0 ? a.decay_steps : std::max<int64_t>(1, a.steps - a.warmup_steps);
    s.min_lr = a.min_lr;
  }
  return s;
}

OptimizerConfig optimizer_config(const TrainArgs& a) {
  OptimizerConfig c;
  c.kind = a.optimizer == "sgd" ? OptimizerConfig::Kind::kSgd : OptimizerConfig::Kind::kAdamW;
  c.lr = static_cast<float>(a.lr > 0 ? a.lr : (a.optimizer == "sgd" ? kDefaultSgdLr : kDefaultAdamWLr));
  c.momentum = static_cast<float>(a.momentum);
  c.weight_decay = static_cast<float>(a.weight_decay);
  c.clip_norm = static_cast<float>(a.clip_norm);
  return c;
}

nlohmann::json read_json_file(const std::string& file, const std::string& option) {
  return read_json_input(file, option, limits::kMaxConfigFileBytes);
}

plan::ModelProfile model_profile(const TrainArgs& model, const std::string& profile_file,
                                 const std::vector<int64_t>& rows, int repeats, bool quiet,
                                 nlohmann::json* description, bool tensor_parallel) {
  TrainArgs t = model;
  t.micro_batches = 1;
  t.batch_size = rows.front();
  Setup first = make_setup(t);
  *description = first.description;
  (*description)["model"] = model_name(t);
  (*description)["num_parameters"] = first.model->num_distinct_parameter_elements();
  if (!profile_file.empty()) {
    plan::ModelProfile p = plan::profile_from_json(read_json_file(profile_file, "--profile"), profile_file);
    const size_t layers = first.model->layers().size();
    PF_CHECK_ARG(static_cast<size_t>(p.num_layers()) == layers, profile_file, ": the profile has ", p.num_layers(),
                 " layers but ", model_name(t), " has ", layers, " (profile the same model options)");
    if (tensor_parallel && (p.tensor_parallel.degrees.empty() || p.tensor_parallel.member_bytes.empty())) {
      const Batch sample = first.data->next();
      p.tensor_parallel = plan::profile_tensor_parallel(*first.model, plan::kMaxProfiledTensorParallel, &sample);
    }
    return p;
  }
  plan::ModelProfile p = plan::profile_model(
      *first.model, rows,
      [&](int64_t r) {
        if (!quiet) std::cerr << "profiling " << model_name(t) << " at " << r << " rows per micro-batch" << std::endl;
        t.batch_size = r;
        return make_setup(t).data->next();
      },
      optimizer_config(t), repeats);
  p.model = *description;
  if (tensor_parallel) {
    // What a member keeps, measured on a micro-batch of the smallest size.
    if (!quiet) std::cerr << "measuring what tensor-parallel members of " << model_name(t) << " keep" << std::endl;
    t.batch_size = rows.front();
    const Batch sample = make_setup(t).data->next();
    p.tensor_parallel = plan::profile_tensor_parallel(*first.model, plan::kMaxProfiledTensorParallel, &sample);
  }
  return p;
}

}  // namespace pf::cli
