#include "runtime/execution/parameter_ownership.h"

#include <cstring>

#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/core/error.h"
#include "runtime/core/sha256.h"

namespace pf::exec {

ParameterOwnership::ParameterOwnership(const Model& model, const ModelStages& stages, const PipelinePlan& plan)
    : plan_(&plan) {
  const comm::World* world = plan.config.world.get();
  if (world) this_rank_ = world->rank();
  const sched::Placement& placement = plan.schedule.placement;
  for (const Stage& stage : stages.stages())
    for (Parameter* p : stage.parameters()) {
      const int rank = placement.rank_of(stage.index());
      auto [it, inserted] = owner_.emplace(p, rank);
      PF_CHECK_ARG(inserted || it->second == rank || !world, "pipeline trainer: parameter '", p->name,
                   "' is used by stage ", stage.index(), " on rank ", rank, " and by a stage on rank ", it->second,
                   " (parameters shared across processes are not supported)");
    }
  for (const Model* m : {&model, static_cast<const Model*>(stages.copy())}) {
    if (!m) continue;
    for (Parameter* p : m->parameters()) {
      if (is_local_rank(owner(p))) {
        allocate_parameter(*p);
        (m == &model ? local_ : local_copies_).push_back(p);
      } else {
        release_parameter(*p);
      }
    }
  }
  const size_t ranks = static_cast<size_t>(plan.schedule.num_ranks());
  rank_params_.assign(ranks, {});
  rank_copies_.assign(ranks, {});
  rank_index_.assign(ranks, {});
  const auto& all = model.parameters();
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t r = static_cast<size_t>(owner(all[i]));
    rank_params_[r].push_back(all[i]);
    rank_index_[r].push_back(i);
  }
  if (stages.copy())
    for (Parameter* q : stages.copy()->parameters()) rank_copies_[static_cast<size_t>(owner(q))].push_back(q);
}

int ParameterOwnership::owner(const Parameter* parameter) const {
  auto it = owner_.find(parameter);
  return it == owner_.end() ? 0 : it->second;
}

std::string ParameterOwnership::checksum(const Model& model) const {
  comm::World* world = plan_->config.world.get();
  const double timeout_seconds = plan_->config.recv_timeout_seconds;
  TensorParallelGroup* split = model.tensor_parallel_group().get();
  if (!world) return whole_parameter_checksum(model.parameters(), split);
  Sha256 digest;
  std::vector<char> bytes;
  for (const Parameter* p : model.parameters()) {
    const int owner_rank = owner(p);
    bytes.resize(static_cast<size_t>(shape_numel(p->shape)) * sizeof(float));
    if (is_local_rank(owner_rank)) {
      // A CUDA parameter (one GPU per process) is read through a host copy.
      const Tensor host = p->value.to_host();
      std::memcpy(bytes.data(), host.data<char>(), bytes.size());
    }
    world->broadcast(bytes.data(), bytes.size(), owner_rank, timeout_seconds);
    hash_whole_parameter(digest, *p, bytes.data(), split);  // a split one gathered over its group
  }
  return digest.hex();
}

}  // namespace pf::exec
