#include "runtime/run/make_trainer.h"

#include <utility>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/run/resolve.h"
#include "runtime/sweep/sweep_fill.h"
#include "runtime/train/sequential_trainer.h"

namespace pf {

std::unique_ptr<Trainer> make_trainer(std::shared_ptr<Model> model, const TrainingConfig& config,
                                      const TrainerInputs& inputs) {
  PF_CHECK_ARG(model != nullptr, "make_trainer: model is null");
  if (!config.pipelined()) {
    check_config_fields(config);
    check_capabilities(capability_facts(*model, config, nullptr), Operation::kTrain, inputs.names);
    if (config.devices.empty()) return std::make_unique<SequentialTrainer>(std::move(model), config.base);
    return std::make_unique<SequentialTrainer>(std::move(model), config.base, config.devices.front());
  }
  PipelinePlan plan = resolve(*model, config, inputs.names, inputs.layer_costs);
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

plan::AdaptiveTrainer* adaptive_of(Trainer& trainer) { return dynamic_cast<plan::AdaptiveTrainer*>(&trainer); }

Refusal operation_refusal(Trainer& trainer, Operation operation, const OptionNamer& names) {
  exec::PipelineTrainer* pipeline = pipeline_of(trainer);
  if (!pipeline) return {};  // the sequential trainer does every operation
  return find_refusal(capability_facts(pipeline->model(), pipeline->options(), &pipeline->plan().schedule), operation,
                      names);
}

}  // namespace pf
