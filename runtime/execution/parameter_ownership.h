// Which rank owns each parameter (the rank of the stage that uses it), the parameters this process
// holds — with one process per rank it allocates its own and releases the others' — and what the
// ranks' own optimizer steps need: each rank's parameters in model order. Also the parameter
// checksum, collective across processes.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/comm/world.h"
#include "runtime/execution/model_stages.h"
#include "runtime/run/resolve.h"

namespace pf::exec {

class ParameterOwnership {
 public:
  // Owners from the stages' placement; allocates this process's parameters and releases the others
  // (one process per rank). kInvalidArgument for a parameter that stages in two processes use.
  ParameterOwnership(const Model& model, const ModelStages& stages, const PipelinePlan& plan);

  // True for a rank this process runs (every rank with threads or devices).
  bool is_local_rank(int rank) const { return this_rank_ < 0 || rank == this_rank_; }
  // The rank whose stage uses `parameter` (0 for one no stage uses).
  int owner(const Parameter* parameter) const;
  // This process's parameters in model order: the first copy's, and the second copy's (two pipelines).
  const std::vector<Parameter*>& local() const { return local_; }
  const std::vector<Parameter*>& local_copies() const { return local_copies_; }
  // Per rank: its parameters in model order, the second copy's, and the index in
  // model.parameters() of each of the first (what the ranks' own optimizer steps use).
  const std::vector<Parameter*>& of_rank(int rank) const { return rank_params_[static_cast<size_t>(rank)]; }
  const std::vector<Parameter*>& copies_of_rank(int rank) const { return rank_copies_[static_cast<size_t>(rank)]; }
  const std::vector<size_t>& model_index_of_rank(int rank) const { return rank_index_[static_cast<size_t>(rank)]; }

  // SHA-256 of every parameter's bytes in model order; with one process per rank a collective call
  // (every process makes it), each parameter broadcast from its owner; a tensor-parallel split one
  // gathered whole over its group.
  std::string checksum(const Model& model) const;

 private:
  const PipelinePlan* plan_;
  int this_rank_ = -1;  // -1: every rank is local
  std::unordered_map<const Parameter*, int> owner_;
  std::vector<Parameter*> local_, local_copies_;
  std::vector<std::vector<Parameter*>> rank_params_, rank_copies_;
  std::vector<std::vector<size_t>> rank_index_;
};

}  // namespace pf::exec
