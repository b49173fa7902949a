// pf_trainer_options read as the runtime's TrainerOptions (its struct_size checked, the defaults
// filled in, each field checked), for the parts of the C API beside pf_trainer_create that take them.
#pragma once

#include "c_api/pipeforge.h"
#include "runtime/train/trainer.h"

namespace pf::capi {

// NULL: the defaults. Throws kInvalidArgument naming the field.
pf::TrainerOptions read_trainer_options(const pf_trainer_options* options);

}  // namespace pf::capi
