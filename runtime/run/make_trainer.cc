#include "runtime/run/make_trainer.h"

#include <utility>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/neuron_groups/neuron_group_trainer.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/run/resolve.h"
#include "runtime/sweep/sweep_fill.h"
#include "runtime/tensor_parallel/split_model.h"
#include "runtime/train/sequential_trainer.h"

namespace pf {

namespace {

// A neuron-group trainer with the config it was made from (operation_refusal reads it).
class GroupTrainer : public groups::NeuronGroupTrainer {
 public:
  GroupTrainer(std::shared_ptr<Model> model, TrainingConfig config, const groups::NeuronGroupOptions& options,
               int update_every)
      : NeuronGroupTrainer(std::move(model), config.base, options, update_every, config.world),
        config_(std::move(config)) {}
  const TrainingConfig& config() const { return config_; }

 private:
  TrainingConfig config_;
};

// Neuron groups: the config's local-learning schedule over `ranks` depth stages, every stage but
// the last split into neuron_groups width groups.
std::unique_ptr<Trainer> make_group_trainer(std::shared_ptr<Model> model, const TrainingConfig& config,
                                            const OptionNamer& names) {
  check_config_fields(config);
  const sched::Schedule schedule = make_config_schedule(config);
  check_capabilities(capability_facts(*model, config, &schedule), Operation::kTrain, names);
  groups::NeuronGroupOptions o;
  o.groups = config.neuron_groups;
  o.stages = config.ranks;
  o.layers_per_stage = config.layers_per_stage;
  o.head = config.local_head != "auto" ? config.local_head : model->local_head();
  o.diversity_weight = config.group_diversity;
  o.diversity_temperature = config.group_diversity_temperature;
  const int every = schedule.traits.update_every(config.base.micro_batches);
  try {
    return std::make_unique<GroupTrainer>(std::move(model), config, o, every);
  } catch (const Error& e) {
    // The layout's refusals ("neuron groups: layer 0 'fc0' has 64 outputs, ...") name the option.
    std::string why = e.what();
    const std::string prefix = "neuron groups: ";
    if (why.compare(0, prefix.size(), prefix) == 0) why = why.substr(prefix.size());
    fail(e.code(), names("neuron_groups"), " ", config.neuron_groups, ": ", why);
  }
}

// The config's tensor-parallel group over its world.
std::shared_ptr<TensorParallelGroup> make_tensor_parallel_group(const TrainingConfig& config) {
  return std::make_shared<TensorParallelGroup>(config.tensor_parallel_world, parse_tensor_reduction(config.tensor_reduction),
                                               config.recv_timeout_seconds, config.sequence_parallel,
                                               config.tensor_parallel_overlap);
}

}  // namespace

std::unique_ptr<Trainer> make_trainer(std::shared_ptr<Model> model, const TrainingConfig& config,
                                      const TrainerInputs& inputs) {
  PF_CHECK_ARG(model != nullptr, "make_trainer: model is null");
  if (!config.pipelined()) {
    check_config_fields(config);
    check_capabilities(capability_facts(*model, config, nullptr), Operation::kTrain, inputs.names);
    if (config.tensor_parallel > 1) {
      split_model_for_tensor_parallel(*model, make_tensor_parallel_group(config));
      // A model built without tensors (DeferParameterAllocation) gets its slices only.
      for (Parameter* p : model->parameters()) allocate_parameter(*p);
    }
    if (config.devices.empty()) return std::make_unique<SequentialTrainer>(std::move(model), config.base);
    return std::make_unique<SequentialTrainer>(std::move(model), config.base, sequential_device(config, inputs.names));
  }
  if (config.neuron_groups > 1) return make_group_trainer(std::move(model), config, inputs.names);
  PipelinePlan plan = resolve(*model, config, inputs.names, inputs.layer_costs);
  // Each stage's layers split over its tensor-parallel group; the pipeline allocates its own stages.
  if (config.tensor_parallel > 1)
    split_model_for_tensor_parallel(*model, make_tensor_parallel_group(config), plan.layers_per_stage);
  if (!plan.config.fill.empty() && !plan.config.fill_job) {
    std::shared_ptr<FillJob> job = make_fill_job(plan.config.fill, plan.schedule.num_ranks(), inputs.names);
    plan.config.fill_job = job;
    plan.config.bubble_fill = [job](int rank, double seconds) { return job->run(rank, seconds); };
  }
  if (!config.adaptation.enabled) return std::make_unique<exec::PipelineTrainer>(std::move(model), std::move(plan));
  return std::make_unique<plan::AdaptiveTrainer>(std::move(model), std::move(plan), inputs.profile);
}

std::shared_ptr<FillJob> make_fill_job(const std::string& fill, int ranks, const OptionNamer& names) {
  const std::string kSweep = "sweep:";
  if (fill.compare(0, kSweep.size(), kSweep) == 0) {
    const std::string path = fill.substr(kSweep.size());
    PF_CHECK_ARG(!path.empty(), names("fill"), ": sweep: needs a file, e.g. sweep:grid.json");
    try {
      return std::make_shared<sweep::SweepFill>(sweep::read_sweep_spec_file(path), ranks);
    } catch (const Error& e) {
      fail(e.code(), names("fill"), " ", fill, ": ", e.what());
    }
  }
  fail(ErrorCode::kInvalidArgument, names("fill"), ": unknown fill job '", fill, "' (known: sweep:FILE)");
}

FillJob* fill_job_of(Trainer& trainer) {
  exec::PipelineTrainer* pipeline = pipeline_of(trainer);
  return pipeline ? pipeline->options().fill_job.get() : nullptr;
}

exec::PipelineTrainer* pipeline_of(Trainer& trainer) {
  if (auto* adaptive = dynamic_cast<plan::AdaptiveTrainer*>(&trainer)) return &adaptive->pipeline();
  return dynamic_cast<exec::PipelineTrainer*>(&trainer);
}

groups::NeuronGroupTrainer* neuron_groups_of(Trainer& trainer) {
  return dynamic_cast<groups::NeuronGroupTrainer*>(&trainer);
}

plan::AdaptiveTrainer* adaptive_of(Trainer& trainer) { return dynamic_cast<plan::AdaptiveTrainer*>(&trainer); }

Refusal operation_refusal(Trainer& trainer, Operation operation, const OptionNamer& names) {
  if (auto* groups = dynamic_cast<GroupTrainer*>(&trainer)) {
    const sched::Schedule schedule = make_config_schedule(groups->config());
    return find_refusal(capability_facts(groups->model(), groups->config(), &schedule), operation, names);
  }
  exec::PipelineTrainer* pipeline = pipeline_of(trainer);
  // The sequential trainer does every operation but those its model's split refuses.
  if (!pipeline) return find_refusal(capability_facts(trainer.model(), TrainingConfig(), nullptr), operation, names);
  return find_refusal(capability_facts(pipeline->model(), pipeline->options(), &pipeline->plan().schedule), operation,
                      names);
}

}  // namespace pf
