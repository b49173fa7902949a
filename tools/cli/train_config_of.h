// `pipeforge train`'s arguments as the runtime's one TrainingConfig (runtime/run/training_config.h),
// and how the command line spells each config key in a refusal (--data-parallel for "replicas").
#pragma once

#include <string>

#include "runtime/run/training_config.h"
#include "tools/cli/train_command.h"

namespace pf::cli {

// Everything but the process groups, which the caller fills under mpirun.
TrainingConfig training_config_of(const TrainArgs& a);
// "--data-parallel" for "replicas", "--stages" for "ranks", ...; the key itself for one without a flag.
std::string cli_option_name(const std::string& key);

}  // namespace pf::cli
