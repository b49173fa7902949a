// Fail-slow adaptation for C callers (pf_trainer_options.adapt, since 0.9): what it refuses, and
// the first step, which profiles a copy of the model on its data and wraps the pipelined trainer
// in a pf::plan::AdaptiveTrainer.
#pragma once

#include <optional>

#include "c_api/handles.h"
#include "c_api/pipeforge.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/train/batch.h"

namespace pf::capi {

// The fail-slow options when options->adapt asks for adaptation, else nullopt. Everything
// adaptation does not support is refused here, in one place, naming the field: no schedule
// (`pipeline` null), an asynchronous or two-pipeline schedule, data parallelism. Throws kInvalidArgument.
std::optional<pf::plan::FailSlowOptions> check_adaptation(const pf_trainer_options& o,
                                                          const pf::exec::PipelineTrainer* pipeline);

// slow_rank and slow_factor into `p` of a schedule of `ranks` ranks (p null: the sequential trainer,
// which refuses a slow_factor). Refused naming the field when out of range.
void convert_slow_rank(const pf_trainer_options& o, int ranks, pf::exec::PipelineOptions* p);

// Before the first step of a trainer that waits to adapt: profiles a copy of its model on the
// step's first micro-batch of `batch` (nothing when the batch rows do not split: the step then
// fails saying why) and becomes adaptive. A no-op otherwise.
void start_adapting(pf_trainer& trainer, const pf::Batch& batch);
// The same on the loader's next micro-batch (the loader is read once more and rewound).
void start_adapting_from_loader(pf_trainer& trainer);

}  // namespace pf::capi
