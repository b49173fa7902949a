// What `pipeforge train` (and `plan`) build from the arguments: the model and its data, the
// optimizer and the learning-rate schedule.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/batch.h"
#include "runtime/train/lr_schedule.h"
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
// The model and its data: rows per micro-batch = --batch-size / --microbatches.
Setup make_setup(const TrainArgs& a);
// "gpt model", "the model of m.json".
std::string model_name(const TrainArgs& a);
LrSchedule lr_schedule(const TrainArgs& a);
OptimizerConfig optimizer_config(const TrainArgs& a);

}  // namespace pf::cli
