// The cost-model options `schedule`, `simulate` and `compare` share: the times (--t-f, --t-b,
// --t-w, --t-comm) and the memory (--m-b, --m-w).
#pragma once

#include "tools/cli/cli_fwd.h"

#include "runtime/schedules/schedule_request.h"

namespace pf::cli {

enum class CostOptions { kTimes, kMemory, kBoth };
void add_cost_options(CLI::App* cmd, sched::UniformCosts& costs, CostOptions which);

}  // namespace pf::cli
