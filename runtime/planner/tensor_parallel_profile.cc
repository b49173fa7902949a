#include "runtime/planner/tensor_parallel_profile.h"

#include <algorithm>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/simulator.h"
#include "runtime/tensor_parallel/split_model.h"

namespace pf::plan {
namespace {

// A copy of `model` without tensors split over a group of T (no collective runs while splitting:
// the other members are never used), or null when it does not split at T.
std::unique_ptr<Model> split_copy(const nlohmann::json& description, int T) {
  std::unique_ptr<Model> copy;
  {
    DeferParameterAllocation defer;
    copy = build_model_from_json(description);
  }
  auto world = std::make_shared<comm::ThreadWorld>(T);
  std::shared_ptr<comm::World> member(world, &world->member(0));
  try {
    split_model_for_tensor_parallel(*copy, std::make_shared<TensorParallelGroup>(member, TensorReduction::kAllReduce, 1.0));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    return nullptr;
  }
  return copy;
}

}  // namespace

TensorParallelProfile profile_tensor_parallel(const Model& model, int max_degree) {
  TensorParallelProfile out;
  const nlohmann::json description = model.to_json();
  for (int T = 2; T <= max_degree; ++T) {
    const std::unique_ptr<Model> copy = split_copy(description, T);
    if (!copy) continue;
    out.degrees.push_back(T);
    if (out.degrees.size() > 1) continue;  // the same layers split at every T
    for (const auto& layer : copy->layers()) {
      int64_t split = 0;
      for (const Parameter* p : layer->parameters())
        if (p->shard.split()) split += shape_numel(p->shard.full);
      const Layer::TensorParallelFloats floats = layer->tensor_parallel_floats();
      out.split_parameters.push_back(split);
      out.forward_floats.push_back(floats.forward);
      out.backward_floats.push_back(floats.backward);
    }
  }
  return out;
}

MicroBatchCosts tensor_parallel_costs(const TensorParallelProfile& tensor_parallel, MicroBatchCosts costs, int T,
                                      double bandwidth, double latency) {
  if (T == 1) return costs;
  PF_CHECK_ARG(std::find(tensor_parallel.degrees.begin(), tensor_parallel.degrees.end(), T) !=
                   tensor_parallel.degrees.end(),
               "the model does not split at tensor_parallel ", T,
               tensor_parallel.degrees.empty() ? std::string(" (nothing in it splits)") : std::string());
  PF_CHECK_ARG(tensor_parallel.split_parameters.size() == costs.layers.size(), "the tensor-parallel profile has ",
               tensor_parallel.split_parameters.size(), " layers, the costs ", costs.layers.size());
  const double tokens = static_cast<double>(costs.tokens);
  for (size_t i = 0; i < costs.layers.size(); ++i) {
    LayerCosts& l = costs.layers[i];
    const double split = static_cast<double>(tensor_parallel.split_parameters[i]);
    const double share = l.parameters > 0 ? split / static_cast<double>(l.parameters) : 0.0;
    const double stays = 1.0 - share + share / T;
    const auto allreduce = [&](int64_t floats) {
      return floats > 0 ? sched::ring_allreduce_time(4.0 * tokens * static_cast<double>(floats), T, bandwidth, latency)
                        : 0.0;
    };
    l.forward_s *= stays;
    l.backward_input_s *= stays;
    l.tensor_parallel_forward_s = allreduce(tensor_parallel.forward_floats[i]);
    l.tensor_parallel_backward_s = allreduce(tensor_parallel.backward_floats[i]);
    l.backward_weight_s *= stays;
    l.parameters = l.parameters - tensor_parallel.split_parameters[i] + tensor_parallel.split_parameters[i] / T;
  }
  return costs;
}

}  // namespace pf::plan
