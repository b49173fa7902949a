// What `pipeforge train` (and `plan`) build from the arguments: the model and its data, the
// optimizer, the learning-rate schedule and the planner's per-layer profile.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/planner/model_profile.h"
#include "runtime/train/batch.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/trainer.h"
#include "tools/cli/data_option.h"
#include "tools/cli/train_command.h"

namespace pf::cli {

struct Setup {
  std::unique_ptr<DataSource> data;
  std::unique_ptr<DataSource> held_out;  // with --eval-every
  std::shared_ptr<Model> model;
  nlohmann::json description;  // model-specific fields for the output
};

// The model stages of the schedule the arguments ask for (1 without one; one pipeline's with two).
int schedule_stages(const TrainArgs& a);
// The ranks of the schedule the arguments ask for.
int schedule_ranks(const TrainArgs& a);
// Fills in what was left to its default after the flags and any config or plan file: the
// micro-batches (a schedule file's own count; else default_micro_batches of the pipeline ranks and
// --batch-size). Throws what reading the schedule file throws.
void resolve_train_defaults(TrainArgs& a);
// The FILE of `data` = {"tokens:FILE"}; "" when `data` names text files. kInvalidArgument naming
// `option` when a token file comes with other data.
std::string token_file_of(const std::vector<std::string>& data, const std::string& option);
// The PATH of `data` = {"cifar10:PATH"}; "" otherwise. kInvalidArgument naming `option` when
// CIFAR-10 images come with other data.
std::string cifar10_path_of(const std::vector<std::string>& data, const std::string& option);
// The model and its data: rows per micro-batch = --batch-size / --microbatches.
Setup make_setup(const TrainArgs& a);
// The model whose weights `checkpoint` holds (a resolved checkpoint path, or ""): the one its
// header describes unless `model_given` (a model option on the command line), else the one the
// options describe. `option` names the checkpoint in errors ("--resume ck").
std::shared_ptr<Model> model_with_weights_of(const TrainArgs& a, const std::string& checkpoint, bool model_given,
                                             const std::string& option);
// A sequential trainer of `model` for reading weights (eval, export): initialised from `seed`, then
// the weights of `checkpoint` (a resolved path, or "") and of the Transformers folder `init_from`
// (or "") loaded.
std::unique_ptr<Trainer> trainer_with_weights(std::shared_ptr<Model> model, uint64_t seed,
                                              const std::string& checkpoint, const std::string& init_from);
// "gpt model", "the model of m.json".
std::string model_name(const TrainArgs& a);
LrSchedule lr_schedule(const TrainArgs& a);
OptimizerConfig optimizer_config(const TrainArgs& a);

// A JSON input file (cluster, profile), refused with a message naming `option` and the file when it
// cannot be read, is too large, nested too deeply or malformed.
nlohmann::json read_json_file(const std::string& file, const std::string& option);
// The per-layer profile of the model `model` describes (`plan` and `train --adapt`): read from
// `profile_file` when it is set (the format of `plan --save-profile`, checked against the model),
// else measured at each of `rows` (ascending; `repeats` runs per measurement, progress on stderr
// unless `quiet`). *description: what was profiled, for reports. `tensor_parallel`: with the
// model's tensor-parallel splits and what a member keeps (plan::profile_tensor_parallel on a
// micro-batch of rows.front() rows; read off the model when the file has none).
plan::ModelProfile model_profile(const TrainArgs& model, const std::string& profile_file,
                                 const std::vector<int64_t>& rows, int repeats, bool quiet,
                                 nlohmann::json* description, bool tensor_parallel = false);

}  // namespace pf::cli
