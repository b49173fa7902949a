#include "runtime/execution/model_stages.h"

#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/models/builders.h"
#include "runtime/tensor_parallel/split_model.h"

namespace pf::exec {

ModelStages::ModelStages(const Model& model, const PipelinePlan& plan) {
  const int per = plan.schedule.stages_per_pipeline();
  ranges_ = partition_layers(static_cast<int>(model.layers().size()), per, plan.layers_per_stage);
  std::vector<std::pair<int, int>> layer_ranges;
  for (const StageRange& r : ranges_) layer_ranges.emplace_back(r.begin, r.end);
  stages_ = make_stages(model, layer_ranges);
  if (plan.schedule.pipelines == 1) return;
  // The second pipeline's stages run the same layers of a second copy of the model.
  copy_ = build_model_from_json(model.to_json());
  // A split model's copy: the same splits (its layers carry the "parallel" annotations) and group.
  if (model.tensor_parallel_group())
    split_model_for_tensor_parallel(*copy_, model.tensor_parallel_group(), plan.layers_per_stage);
  for (int j = 0; j < per; ++j) {
    stages_.emplace_back(*copy_, per + j, 2 * per, layer_ranges[static_cast<size_t>(j)].first,
                         layer_ranges[static_cast<size_t>(j)].second);
    ranges_.push_back(ranges_[static_cast<size_t>(j)]);
  }
}

}  // namespace pf::exec
