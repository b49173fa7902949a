// The one place that builds trainers — for the command line, the C API (and through it every
// binding), `train --plan` and the benchmarks: the sequential trainer when the config names no
// schedule, a PipelineTrainer over resolve()'s plan, or an AdaptiveTrainer when the config asks
// for adaptation.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/planner/model_profile.h"
#include "runtime/run/capabilities.h"
#include "runtime/run/training_config.h"
#include "runtime/train/trainer.h"

namespace pf {
namespace exec {
class PipelineTrainer;
}  // namespace exec
namespace plan {
class AdaptiveTrainer;
}  // namespace plan
namespace groups {
class NeuronGroupTrainer;
}  // namespace groups

struct TrainerInputs {
  OptionNamer names = runtime_option_name;  // how the caller spells options in refusals
  // Adaptation: the profile at the run's micro-batch rows; none: measured at the first step.
  std::optional<plan::MicroBatchCosts> profile;
  // PartitionKind::kMeasured: each top-level layer's measured time (exec::measure_layer_times).
  std::vector<double> layer_costs;
};

// Checks `config` (fields, then the capability table) and builds its trainer over `model`
// (retained). Throws the first refusal naming the option as `inputs.names` spells it.
std::unique_ptr<Trainer> make_trainer(std::shared_ptr<Model> model, const TrainingConfig& config,
                                      const TrainerInputs& inputs = {});

// The fill job TrainingConfig::fill names ("sweep:FILE") for a pipeline of `ranks` ranks.
// kInvalidArgument naming the option (as `names` spells "fill") for an unknown job; the job's own
// errors (an unreadable file, a bad spec) with the option prefixed.
std::shared_ptr<FillJob> make_fill_job(const std::string& fill, int ranks, const OptionNamer& names = runtime_option_name);
// The fill job of a trainer make_trainer built, or null.
FillJob* fill_job_of(Trainer& trainer);

// The pipelined trainer doing the work of a trainer make_trainer built (itself, or the one an
// adaptive trainer runs now: ask again after every step), or null for the sequential trainer.
exec::PipelineTrainer* pipeline_of(Trainer& trainer);
// The neuron-group trainer (TrainingConfig::neuron_groups > 1), or null.
groups::NeuronGroupTrainer* neuron_groups_of(Trainer& trainer);
// The adaptive trainer, or null.
plan::AdaptiveTrainer* adaptive_of(Trainer& trainer);
// The refusal of `operation` (evaluation, checkpoints) for a trainer make_trainer built.
Refusal operation_refusal(Trainer& trainer, Operation operation, const OptionNamer& names = runtime_option_name);

}  // namespace pf
