// Resolve once, then execute: resolve() checks a TrainingConfig for a model (its fields, then the
// capability table), generates the schedule once and decides everything that does not change while
// training — the lowered schedule and its traits, the activation policy's pass, the partition, where
// each rank runs, the loss scale, the step windows of a schedule that never flushes. The trainer's
// parts read the plan; nothing downstream re-derives or re-checks it.
#pragma once

#include <vector>

#include "runtime/models/model.h"
#include "runtime/run/capabilities.h"
#include "runtime/run/training_config.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/step_windows.h"

namespace pf {

// Who applies the optimizer update.
enum class OptimizerMode {
  kStages,       // windowed schedules: every stage updates itself (UPDATE actions)
  kOnWorkers,    // each CPU rank's worker clips and steps its own stages' parameters
  kMainThread,   // the main thread steps every parameter after the workers finished
  kPerProcess,   // one process per rank: each steps its own, the gradient norm gathered from all
};

struct PipelinePlan {
  TrainingConfig config;           // as given (devices: one entry per rank, or none on the CPU)
  // What runs: lowered, with its traits, a static activation policy applied and the ALLREDUCEs of
  // data parallelism added. A measured policy (selective, balance) is applied by the trainer from
  // base_schedule once the first micro-batch's activation bytes are known.
  sched::Schedule schedule;
  sched::Schedule base_schedule;   // lowered, before the activation policy
  sched::CommSemantics comm = sched::CommSemantics::kRendezvous;
  sched::ActivationPolicy policy = sched::ActivationPolicy::kNone;
  std::vector<int> layers_per_stage;  // top-level layers of each stage of one pipeline
  RankPlacement placement = RankPlacement::kThreads;
  // The CUDA ordinal of each rank (kGpu); one process per rank on CUDA devices: this process's
  // rank's, -1 for the others (empty: CPU ranks).
  std::vector<int> rank_device;
  float loss_scale = 1.0f;         // of each unit's (micro-batch's or slice's) loss
  sched::StepWindows windows;      // windowed schedules: each step's action lists
  OptimizerMode optimizer_mode = OptimizerMode::kMainThread;
  // config.bubble_fill (or fill) runs: a synchronous schedule with CPU threads (the capability
  // table refuses a fill job elsewhere).
  bool fills_bubbles = false;

  bool measured_policy() const {
    return policy == sched::ActivationPolicy::kSelective || policy == sched::ActivationPolicy::kBalance;
  }
};

// The processes a plan's parameters are spread over (pipeline null: this process holds them all).
ProcessGroups process_groups_of(const PipelinePlan& plan);
// This process's data-parallel replica (0 with one replica).
int replica_index(const PipelinePlan& plan);

// The schedule the config names, generated (or parsed); kInvalidArgument for an unknown name.
sched::Schedule make_config_schedule(const TrainingConfig& config);

// The field checks of a config (ranges, names, sizes): kInvalidArgument naming the field.
void check_config_fields(const TrainingConfig& config);

// The device of a run without a pipeline schedule (config.devices non-empty): devices[0]. A
// tensor-parallel member chooses as a pipeline rank in its own process does (comm::process_device):
// with one entry per member its own, and with one `cuda` entry under a launcher (mpirun) the GPU of
// its node-local rank; members that are threads of one process share devices[0]. kInvalidArgument
// naming the option and the member when that device is not visible.
Device sequential_device(const TrainingConfig& config, const OptionNamer& names = runtime_option_name);

// The facts the capability table reads for `config` on `model`; `schedule` is the generated or
// parsed schedule (null for the sequential trainer).
CapabilityFacts capability_facts(const Model& model, const TrainingConfig& config, const sched::Schedule* schedule);

// The one resolver of a pipelined config (config.pipelined()). Throws the first refusal: a field
// (kInvalidArgument), a combination the capability table refuses (its code), a schedule or a
// partition the model cannot take, a device that is not there. `names` spells options in messages.
// `layer_costs`: each top-level layer's measured cost, which PartitionKind::kMeasured splits by.
PipelinePlan resolve(const Model& model, const TrainingConfig& config, const OptionNamer& names = runtime_option_name,
                     const std::vector<double>& layer_costs = {});

}  // namespace pf
