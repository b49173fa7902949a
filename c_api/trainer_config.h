// pf_trainer_options read as the runtime's one TrainingConfig (its struct_size checked, the
// defaults filled in, each field checked and named as options-><field>), and how the C API spells
// a config key in a refusal. What may combine with what is the capability table's
// (runtime/run/capabilities.h), checked by make_trainer.
#pragma once

#include <string>

#include "c_api/pipeforge.h"
#include "runtime/run/training_config.h"

namespace pf::capi {

// NULL: the defaults. Throws kInvalidArgument naming the field. The process groups stay empty.
pf::TrainingConfig read_training_config(const pf_trainer_options* options);
// The options struct as given (NULL: the defaults; an older caller's shorter struct: its tail defaulted).
pf_trainer_options read_options_struct(const pf_trainer_options* options);
// The pipeline ranks P of the schedule the options describe (parses a schedule text).
int schedule_ranks(const pf_trainer_options& options);
// "options->data_parallel" for "replicas", "options->adapt" for "adaptation", ...
std::string c_option_name(const std::string& key);
// The defaults pf_trainer_options_init writes.
pf_trainer_options default_trainer_options();

}  // namespace pf::capi
