// Config files of `pipeforge train` (docs/TRAINING.md, "Config files"): one JSON object in sections,
//   {"model": {...}, "data": {...}, "trainer": {...}, "evaluation": {...}, "schedule": {...},
//    "memory": {...}, "devices": "cpu", "checkpointing": {...}, "logging": {...}}
// where every field stands for one command-line option (train_config_fields()). The command line
// wins over the file: a field applies only when its option was not given. Values go through the
// option's own checks; an unknown field, a value of the wrong type or one the option refuses is a
// usage error naming the file and the field's JSON path ("run.json: trainer.stpes: unknown field;
// did you mean 'trainer.steps'?"). model.json holds a model inline (the C API's model JSON).
#pragma once

#include "tools/cli/cli_fwd.h"
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tools/cli/train_command.h"

namespace pf::cli {

// Applies args.config (when set) to the options of `train` that the command line did not give.
// Throws pf::Error kInvalidArgument (file and JSON path in the message) or kNotFound.
void apply_train_config(CLI::App& train, TrainArgs& args);

// --resume: what the checkpoint's run used, for every option given neither on the command line
// nor in a plan or config file: the model (unless a model option is given), the data, and the
// trainer's options but the steps, the data parallelism and the BLAS threads; the schedule and
// outputs are not restored. A checkpoint saved before 0.12 (no "run" in its header) gives its
// model alone. So `train --resume CKPT` alone continues the run bitwise. Records the model options
// given in args.model_options_given (a mismatch names them). Returns true when it restored
// anything. A checkpoint it cannot read is left for the load to report.
bool adopt_checkpoint_model(CLI::App& train, TrainArgs& args);

// The model's options (the config's model.* fields: --model, --layers, ...) given on `cmd`'s
// command line, as their flags; `cmd` has add_model_options' options (train, plan, eval).
std::vector<std::string> model_options_given(const CLI::App& cmd);

// The effective config of parsed arguments, in the file's form (every field, defaults included):
// `pipeforge train --print-config > run.json` then `--config run.json` runs the same training.
nlohmann::ordered_json effective_train_config(const TrainArgs& args);

}  // namespace pf::cli
