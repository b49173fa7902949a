#include "tools/cli/train_config.h"

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/run/checkpoint_series.h"

#include <cmath>
#include <functional>
#include <system_error>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"
#include "runtime/core/suggest.h"

namespace pf::cli {
namespace {

using nlohmann::json;

// One config field: its JSON path, the option it stands for (nullptr: model.json, which has no
// option), and its value in parsed arguments (null: the option's default is in effect).
// kOutputPath: a string naming a file or folder the run writes, which a file may choose only as
// its trust allows (check_output_path).
enum class Type { kString, kOutputPath, kBool, kInteger, kNumber, kStrings, kIntegers, kObject };

// Where a field's value comes from (docs/LIMITS.md, "Who may choose output paths").
enum class Source {
  kConfigFile,  // --config: the user's own file; output paths inside the current folder only
  kPlanFile,    // --plan: often someone else's; no output paths at all
};

struct Field {
  const char* path;
  const char* option;
  Type type;  // what the JSON value must be
  std::function<json(const TrainArgs&)> get;
};

const char* type_name(Type type) {
  switch (type) {
    case Type::kString:
      return "a string";
    case Type::kOutputPath:
      return "a path (a string)";
    case Type::kBool:
      return "true or false";
    case Type::kInteger:
      return "an integer";
    case Type::kNumber:
      return "a number";
    case Type::kStrings:
      return "a list of strings";
    case Type::kIntegers:
      return "a list of integers";
    case Type::kObject:
      break;
  }
  return "an object";
}

bool has_type(const json& v, Type type) {
  auto all = [&](bool (json::*is)() const noexcept) {
    for (const json& e : v)
      if (!(e.*is)()) return false;
    return true;
  };
  switch (type) {
    case Type::kString:
    case Type::kOutputPath:
      return v.is_string();
    case Type::kBool:
      return v.is_boolean();
    case Type::kInteger:
      return v.is_number_integer();
    case Type::kNumber:
      return v.is_number();
    case Type::kStrings:
      return v.is_array() && all(&json::is_string);
    case Type::kIntegers:
      return v.is_array() && all(&json::is_number_integer);
    case Type::kObject:
      break;
  }
  return v.is_object();
}

json or_null(bool is_default, json value) { return is_default ? json() : std::move(value); }
json text_or_null(const std::string& s) { return or_null(s.empty(), s); }

const std::vector<Field>& fields() {
  static const std::vector<Field> all = {
      {"model.kind", "--model", Type::kString, [](const TrainArgs& a) { return json(a.model); }},
      {"model.file", "--model-file", Type::kString, [](const TrainArgs& a) { return text_or_null(a.model_file); }},
      {"model.init_from", "--init-from", Type::kString, [](const TrainArgs& a) { return text_or_null(a.init_from); }},
      {"model.json", nullptr, Type::kObject,
       [](const TrainArgs& a) { return a.model_json.empty() ? json() : json::parse(a.model_json); }},
      {"model.layers", "--layers", Type::kInteger, [](const TrainArgs& a) { return or_null(a.layers < 0, a.layers); }},
      {"model.d_model", "--d-model", Type::kInteger, [](const TrainArgs& a) { return json(a.d_model); }},
      {"model.heads", "--heads", Type::kInteger, [](const TrainArgs& a) { return json(a.heads); }},
      {"model.tie_embeddings", "--tie-embeddings", Type::kBool, [](const TrainArgs& a) { return json(a.tie_embeddings); }},
      {"model.kv_heads", "--kv-heads", Type::kInteger, [](const TrainArgs& a) { return or_null(a.kv_heads < 0, a.kv_heads); }},
      {"model.seq_len", "--seq-len", Type::kInteger, [](const TrainArgs& a) { return json(a.seq_len); }},
      {"model.vocab", "--vocab", Type::kInteger, [](const TrainArgs& a) { return or_null(a.vocab < 0, a.vocab); }},
      {"model.hidden", "--hidden", Type::kInteger, [](const TrainArgs& a) { return or_null(a.hidden < 0, a.hidden); }},
      {"model.features", "--features", Type::kInteger, [](const TrainArgs& a) { return json(a.features); }},
      {"model.classes", "--classes", Type::kInteger, [](const TrainArgs& a) { return json(a.classes); }},
      {"data.files", "--data", Type::kStrings, [](const TrainArgs& a) { return json(a.data); }},
      {"data.held_out", "--held-out", Type::kNumber, [](const TrainArgs& a) { return or_null(a.held_out < 0, a.held_out); }},
      {"trainer.steps", "--steps", Type::kInteger, [](const TrainArgs& a) { return json(a.steps); }},
      {"trainer.batch_size", "--batch-size", Type::kInteger, [](const TrainArgs& a) { return json(a.batch_size); }},
      {"trainer.micro_batches", "--micro-batches", Type::kInteger,
       [](const TrainArgs& a) { return or_null(a.micro_batches <= 0, a.micro_batches); }},  // 0: not given
      {"trainer.seed", "--seed", Type::kInteger, [](const TrainArgs& a) { return json(a.seed); }},
      {"trainer.optimizer", "--optimizer", Type::kString, [](const TrainArgs& a) { return json(a.optimizer); }},
      {"trainer.lr", "--lr", Type::kNumber, [](const TrainArgs& a) { return or_null(a.lr <= 0, a.lr); }},
      {"trainer.momentum", "--momentum", Type::kNumber, [](const TrainArgs& a) { return json(a.momentum); }},
      {"trainer.weight_decay", "--weight-decay", Type::kNumber, [](const TrainArgs& a) { return json(a.weight_decay); }},
      {"trainer.clip_norm", "--clip-norm", Type::kNumber, [](const TrainArgs& a) { return json(a.clip_norm); }},
      {"trainer.blas_threads", "--blas-threads", Type::kInteger, [](const TrainArgs& a) { return json(a.blas_threads); }},
      {"trainer.lr_schedule.kind", "--lr-schedule", Type::kString, [](const TrainArgs& a) { return json(a.lr_schedule); }},
      {"trainer.lr_schedule.warmup_steps", "--warmup-steps", Type::kInteger, [](const TrainArgs& a) { return json(a.warmup_steps); }},
      {"trainer.lr_schedule.decay_steps", "--decay-steps", Type::kInteger,
       [](const TrainArgs& a) { return or_null(a.decay_steps <= 0, a.decay_steps); }},
      {"trainer.lr_schedule.min_lr", "--min-lr", Type::kNumber, [](const TrainArgs& a) { return json(a.min_lr); }},
      {"trainer.data_parallel", "--data-parallel", Type::kInteger, [](const TrainArgs& a) { return json(a.data_parallel); }},
      {"trainer.gradient_reduction", "--gradient-reduction", Type::kString,
       [](const TrainArgs& a) { return json(a.gradient_reduction); }},
      {"trainer.tensor_parallel", "--tensor-parallel", Type::kInteger, [](const TrainArgs& a) { return json(a.tensor_parallel); }},
      {"trainer.tensor_reduction", "--tensor-reduction", Type::kString,
       [](const TrainArgs& a) { return json(a.tensor_reduction); }},
      {"trainer.sequence_parallel", "--sequence-parallel", Type::kBool,
       [](const TrainArgs& a) { return json(a.sequence_parallel); }},
      {"trainer.tensor_parallel_overlap", "--tensor-parallel-overlap", Type::kBool,
       [](const TrainArgs& a) { return json(a.tensor_parallel_overlap); }},
      {"evaluation.every", "--eval-every", Type::kInteger, [](const TrainArgs& a) { return json(a.eval_every); }},
      {"evaluation.micro_batches", "--eval-batches", Type::kInteger,
       [](const TrainArgs& a) { return or_null(a.eval_batches <= 0, a.eval_batches); }},
      {"schedule.name", "--schedule", Type::kString, [](const TrainArgs& a) { return text_or_null(a.schedule); }},
      {"schedule.file", "--schedule-file", Type::kString, [](const TrainArgs& a) { return text_or_null(a.schedule_file); }},
      {"schedule.ranks", "--ranks", Type::kInteger, [](const TrainArgs& a) { return json(a.stages); }},
      {"schedule.chunks", "--chunks", Type::kInteger, [](const TrainArgs& a) { return json(a.chunks); }},
      {"schedule.seq_slices", "--seq-slices", Type::kInteger, [](const TrainArgs& a) { return json(a.seq_slices); }},
      {"schedule.layers_per_stage", "--layers-per-stage", Type::kIntegers, [](const TrainArgs& a) { return json(a.layers_per_stage); }},
      {"schedule.partition", "--partition", Type::kString, [](const TrainArgs& a) { return json(a.partition); }},
      {"schedule.overlap_steps", "--overlap-steps", Type::kBool, [](const TrainArgs& a) { return json(a.overlap_steps); }},
      {"schedule.vertical_sync", "--vertical-sync", Type::kBool, [](const TrainArgs& a) { return json(a.vertical_sync); }},
      {"schedule.spectrain_version", "--spectrain-version", Type::kInteger,
       [](const TrainArgs& a) { return json(a.spectrain_version); }},
      {"schedule.pipemare_anneal", "--pipemare-anneal", Type::kInteger, [](const TrainArgs& a) { return json(a.pipemare_anneal); }},
      {"schedule.pipemare_decay", "--pipemare-decay", Type::kNumber, [](const TrainArgs& a) { return json(a.pipemare_decay); }},
      {"schedule.local_head", "--local-head", Type::kString, [](const TrainArgs& a) { return json(a.local_head); }},
      {"schedule.neuron_groups", "--neuron-groups", Type::kInteger, [](const TrainArgs& a) { return json(a.neuron_groups); }},
      {"schedule.group_diversity", "--group-diversity", Type::kNumber,
       [](const TrainArgs& a) { return json(a.group_diversity); }},
      {"schedule.group_diversity_temperature", "--group-diversity-temperature", Type::kNumber,
       [](const TrainArgs& a) { return json(a.group_diversity_temperature); }},
      {"adaptation.enabled", "--adapt", Type::kBool, [](const TrainArgs& a) { return json(a.adapt); }},
      {"adaptation.threshold", "--adapt-threshold", Type::kNumber, [](const TrainArgs& a) { return json(a.adapt_threshold); }},
      {"adaptation.patience", "--adapt-patience", Type::kInteger, [](const TrainArgs& a) { return json(a.adapt_patience); }},
      {"adaptation.profile", "--profile", Type::kString, [](const TrainArgs& a) { return text_or_null(a.profile); }},
      {"adaptation.slow_rank", "--slow-rank", Type::kInteger,
       [](const TrainArgs& a) { return or_null(a.slow_rank < 0, a.slow_rank); }},
      {"adaptation.slow_factor", "--slow-factor", Type::kNumber, [](const TrainArgs& a) { return json(a.slow_factor); }},
      {"memory.activation_policy", "--activation-policy", Type::kString,
       [](const TrainArgs& a) { return json(a.activation_policy); }},
      {"memory.activation_budget", "--activation-budget", Type::kNumber,
       [](const TrainArgs& a) { return or_null(a.activation_budget <= 0, a.activation_budget); }},
      {"memory.offload_dir", "--offload-dir", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.offload_dir); }},
      {"devices", "--devices", Type::kString, [](const TrainArgs& a) { return text_or_null(a.devices); }},
      {"fill", "--fill", Type::kString, [](const TrainArgs& a) { return text_or_null(a.fill); }},
      {"checkpointing.every", "--checkpoint-every", Type::kInteger, [](const TrainArgs& a) { return json(a.checkpoint_every); }},
      {"checkpointing.dir", "--checkpoint-dir", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.checkpoint_dir); }},
      {"checkpointing.keep", "--keep-checkpoints", Type::kInteger, [](const TrainArgs& a) { return json(a.keep_checkpoints); }},
      {"checkpointing.save", "--checkpoint", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.checkpoint); }},
      {"checkpointing.resume", "--resume", Type::kString, [](const TrainArgs& a) { return text_or_null(a.resume); }},
      {"logging.metrics_log", "--metrics-log", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.metrics_log); }},
      {"logging.trace", "--trace", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.trace_file); }},
      {"logging.svg", "--svg", Type::kOutputPath, [](const TrainArgs& a) { return text_or_null(a.svg_file); }},
      {"logging.svg_width", "--svg-width", Type::kNumber, [](const TrainArgs& a) { return json(a.svg_width); }},
  };
  return all;
}

const Field* find_field(const std::string& path) {
  for (const Field& f : fields())
    if (path == f.path) return &f;
  return nullptr;
}

// True when `path` is a section (or sub-section) some field lies in.
bool is_section(const std::string& path) {
  const std::string prefix = path + ".";
  for (const Field& f : fields())
    if (std::string(f.path).rfind(prefix, 0) == 0) return true;
  return false;
}

std::vector<std::string> field_paths() {
  std::vector<std::string> paths;
  for (const Field& f : fields()) paths.push_back(f.path);
  return paths;
}

// The option's results for a JSON value: one string per value (arrays: one per element).
std::vector<std::string> as_results(const json& value, const std::string& where) {
  std::vector<std::string> out;
  auto scalar = [&](const json& v) {
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
    } else if (v.is_boolean()) {
      out.push_back(v.get<bool>() ? "true" : "false");
    } else if (v.is_number()) {
      out.push_back(v.dump());
    } else {
      fail(ErrorCode::kInvalidArgument, where, ": expected a string, number or boolean, got ", v.type_name());
    }
  };
  if (value.is_array()) {
    for (const json& v : value) scalar(v);
  } else {
    scalar(value);
  }
  return out;
}

// An output path from a file: a plan may choose none (a plan received from someone else must not
// make `train` overwrite what it names); a config file only one inside the current folder:
// relative, without "..", and no symbolic link on the way.
void check_output_path(const std::string& value, Source source, const Field& field, const std::string& where) {
  const std::string instead = std::string("; give ") + field.option + " on the command line instead";
  PF_CHECK_ARG(source != Source::kPlanFile, where, ": a plan may not choose where the run writes ('", value, "')",
               instead);
  const PathEscape escape = find_path_escape("", value);
  PF_CHECK_ARG(escape.kind != PathEscape::Kind::kNotRelative, where, ": '", value,
               "' is not inside the current folder (a config file may choose output paths there only)", instead);
  PF_CHECK_ARG(escape.kind != PathEscape::Kind::kParent, where, ": '", value,
               "' leaves the current folder ('..'; a config file may choose output paths inside it only)", instead);
  PF_CHECK_ARG(escape.kind != PathEscape::Kind::kSymlink, where, ": '", value, "' goes through the symbolic link '",
               escape.link, "' (a config file may choose output paths inside the current folder only)", instead);
}

void apply_field(CLI::App& train, TrainArgs& args, const Field& field, const json& value, const std::string& where,
                 Source source) {
  if (value.is_null()) return;  // the default
  PF_CHECK_ARG(has_type(value, field.type), where, ": expected ", type_name(field.type), ", got ",
               value.is_array() ? "a list with other values" : value.type_name());
  if (field.option == nullptr) {  // model.json
    if (!args.model_file.empty()) return;  // --model-file on the command line wins
    args.model_json = value.dump();
    return;
  }
  CLI::Option* option = train.get_option(field.option);
  if (option->count() > 0) return;  // given on the command line
  if (field.type == Type::kOutputPath) check_output_path(value.get<std::string>(), source, field, where);
  const std::vector<std::string> results = as_results(value, where);
  if (results.empty()) return;  // an empty list: the default
  try {
    option->add_result(results);
    option->run_callback();
  } catch (const CLI::Error& e) {
    fail(ErrorCode::kInvalidArgument, where, ": ", e.what());
  }
}

void apply_object(CLI::App& train, TrainArgs& args, const json& object, const std::string& prefix,
                  const std::string& file, Source source) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    const std::string where = file + ": " + path;
    if (const Field* field = find_field(path)) {
      apply_field(train, args, *field, it.value(), where, source);
    } else if (is_section(path)) {
      PF_CHECK_ARG(it.value().is_object(), where, ": expected an object (a section), got ", it.value().type_name());
      apply_object(train, args, it.value(), path, file, source);
    } else {
      fail(ErrorCode::kInvalidArgument, where, ": unknown field", did_you_mean(path, field_paths()),
           " (docs/TRAINING.md lists the fields)");
    }
  }
}

// Puts `value` at dotted `path` in `root` (sections in the order of fields()).
void set_path(nlohmann::ordered_json& root, const std::string& path, const json& value) {
  nlohmann::ordered_json* node = &root;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    node = &(*node)[path.substr(start, dot - start)];
    start = dot + 1;
  }
  (*node)[path.substr(start)] = nlohmann::ordered_json::parse(value.dump());
}

json read_json(const std::string& file, const char* what) {
  return read_json_input(file, what, limits::kMaxConfigFileBytes);
}

}  // namespace

// The plan first: an option it sets counts as given, so the config file fills only the rest.
void apply_train_config(CLI::App& train, TrainArgs& args) {
  if (!args.plan.empty()) {
    const std::string& file = args.plan;
    const json plan = read_json(file, "plan file");
    PF_CHECK_ARG(plan.is_object() && plan.value("format", std::string()) == "pipeforge.plan/1", file,
                 ": not a plan of `pipeforge plan` (format pipeforge.plan/1)");
    PF_CHECK_ARG(plan.contains("train_config") && plan["train_config"].is_object(), file,
                 ": train_config: missing (the plan found nothing that fits)");
    apply_object(train, args, plan["train_config"], "", file + ": train_config", Source::kPlanFile);
    // Shown against the measured step time at the end of the run.
    if (plan.contains("choice") && plan["choice"].is_object() && plan["choice"].contains("step_seconds") &&
        plan["choice"]["step_seconds"].is_number()) {
      const double predicted = plan["choice"]["step_seconds"].get<double>();
      if (std::isfinite(predicted) && predicted > 0) args.plan_step_seconds = predicted;
    }
  }
  if (args.config.empty()) return;
  const std::string& file = args.config;
  const json config = read_json(file, "config file");
  PF_CHECK_ARG(config.is_object(), file, ": expected a JSON object with the sections model, data, trainer, ...");
  apply_object(train, args, config, "", file, Source::kConfigFile);
}

std::vector<std::string> model_options_given(const CLI::App& cmd) {
  std::vector<std::string> given;
  for (const Field& f : fields()) {
    if (std::string(f.path).rfind("model.", 0) != 0 || f.option == nullptr) continue;
    if (cmd.get_option(f.option)->count() > 0) given.push_back(f.option);
  }
  return given;
}

bool adopt_checkpoint_model(CLI::App& train, TrainArgs& args) {
  args.model_options_given = model_options_given(train);
  if (!args.model_json.empty()) args.model_options_given.push_back("model.json (config)");
  if (args.resume.empty()) return false;
  json header;
  try {
    header = checkpoint_header(resolve_checkpoint(args.resume));
  } catch (const Error&) {
    return false;  // the load reports it, as without this step
  }
  const bool model_given = !args.model_options_given.empty() || !args.model_file.empty();
  if (header.contains("run")) {
    // What was trained and how the data and the optimizer went, where the user gave nothing:
    // not the steps (further steps are the user's), the parallel layout (resuming under another
    // one is the point of resharding), outputs or the checkpoint options.
    json restored = json::object();
    for (const char* section : {"model", "data", "trainer"}) {
      if (!header["run"].contains(section) || !header["run"][section].is_object()) continue;
      if (std::string(section) == "model" && model_given) continue;
      restored[section] = header["run"][section];
    }
    if (restored.contains("trainer")) {
      for (const char* key : {"steps", "data_parallel", "gradient_reduction", "tensor_parallel", "tensor_reduction",
                              "sequence_parallel", "blas_threads"})
        restored["trainer"].erase(key);
    }
    apply_object(train, args, restored, "", args.resume + ": run", Source::kPlanFile);
    return true;
  }
  if (model_given) return false;
  args.model_json = header["model"].dump();  // saved before 0.12: the model alone
  return true;
}

nlohmann::ordered_json effective_train_config(const TrainArgs& args) {
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  for (const Field& f : fields()) set_path(config, f.path, f.get(args));
  return config;
}

}  // namespace pf::cli
