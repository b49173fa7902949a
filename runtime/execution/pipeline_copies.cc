// PipelineTrainer with two pipelines (Schedule::pipelines = 2, bitpipe): the second copy of the
// model, its stages and what it cannot do yet.
#include <cstring>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"

namespace pf::exec {

void PipelineTrainer::make_model_stages() {
  const int per = schedule_.stages_per_pipeline();
  stages_ = partition_layers(static_cast<int>(model_->layers().size()), per, options_.layers_per_stage);
  std::vector<std::pair<int, int>> ranges;
  for (const StageRange& r : stages_) ranges.emplace_back(r.begin, r.end);
  model_stages_ = make_stages(*model_, ranges);
  if (schedule_.pipelines == 1) return;
  // The second pipeline's stages run the same layers of a second copy of the model (same names,
  // so the same initial values from the seed).
  copy_ = build_model_from_json(model_->to_json());
  for (int j = 0; j < per; ++j) {
    model_stages_.emplace_back(*copy_, per + j, 2 * per, ranges[static_cast<size_t>(j)].first,
                               ranges[static_cast<size_t>(j)].second);
    stages_.push_back(stages_[static_cast<size_t>(j)]);
  }
}

void PipelineTrainer::check_two_pipelines() const {
  const std::string what = "schedule '" + schedule_.name + "' trains two copies of the model (pipelines 2)";
  if (gpu_) fail(ErrorCode::kUnimplemented, "pipeline trainer: ", what, " on the CPU only yet");
  PF_CHECK_ARG(options_.base.replicas == 1, "replicas ", options_.base.replicas, ": ", what,
               ", which is data parallelism of its own; use replicas 1");
  if (policy_ == sched::ActivationPolicy::kSelective || policy_ == sched::ActivationPolicy::kBalance)
    fail(ErrorCode::kUnimplemented, "pipeline trainer: activation policy '", options_.activation_policy, "' with ",
         what, " is not supported yet; use none, recompute, offload-host or offload-file");
}

std::string PipelineTrainer::checkpoint_load_refusal() const {
  if (!copy_ || !options_.world) return "";
  return "schedule '" + schedule_.name +
         "' (two copies of the model) with one process per rank cannot resume from a checkpoint yet";
}

void PipelineTrainer::sync_model_copy() {
  if (!copy_) return;
  PF_INTERNAL_CHECK(!options_.world, "pipeline trainer: ", checkpoint_load_refusal());
  const auto& first = model_->parameters();
  const auto& second = copy_->parameters();
  for (size_t i = 0; i < first.size(); ++i) second[i]->value.copy_from(first[i]->value);
  copy_optimizer_->state().clear();
  for (const auto& [name, slot] : optimizer_->state()) copy_optimizer_->state().emplace(name, slot.clone());
  copy_optimizer_->set_steps_taken(optimizer_->steps_taken());
}

}  // namespace pf::exec
