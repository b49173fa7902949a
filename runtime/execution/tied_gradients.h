// Weight tying across stages (Parameter::tied_to: e.g. a head tied to the token embedding, one on
// the first stage and one on the last): once every rank's gradients are final and the data-parallel
// reductions done, each tied pair's two gradients become their sum, primary + copy, before the
// norm and the update; SequentialTrainer's sum_tied_gradients (runtime/train/trainer.h) is the
// same arithmetic, so every synchronous schedule stays bitwise equal to it. Where both halves are
// in this process (threads, a V placement, one process) they are added in place; across processes
// the two owners swap their gradients through their ranks' endpoints (message kind
// kStageGradients, keyed by the receiving rank) and each adds the other's to its own — float
// addition is commutative, so both get the same bits. This happens at the step's barrier: the
// capability table refuses ties with overlapping steps and the schedules that update inside a step.
// Two pipelines (bitpipe): by then the sibling exchange has given both copies the two pipelines'
// sums, and each copy's pairs are summed the same way (SequentialTrainer with two replicas sums
// the replicas first, then the tied pair), the second copy's messages keyed apart.
#pragma once

#include <utility>
#include <vector>

#include "runtime/comm/rank_group.h"
#include "runtime/execution/parameter_ownership.h"
#include "runtime/models/model.h"

namespace pf::exec {

class TiedGradients {
 public:
  // `copy`: the second pipeline's copy of the model (ModelStages::copy), or null.
  TiedGradients(const Model& model, const Model* copy, const ParameterOwnership& ownership);
  bool empty() const { return pairs_.empty(); }
  // Sums every pair (a collective step for the two owners of a pair split over processes; a
  // missing peer is kTimeout naming it).
  void sum(comm::RankGroup& group, double timeout_seconds) const;
  // The halves of the first copy this process holds whose gradient sum() changed.
  const std::vector<Parameter*>& changed() const { return changed_; }

 private:
  struct Pair {
    Parameter* primary;
    Parameter* copy;
    int model_copy;  // 0: the model's pair, 1: the second copy's (its messages' micro-batch field)
  };
  const ParameterOwnership* ownership_;
  std::vector<Pair> pairs_;
  std::vector<Parameter*> changed_;
};

}  // namespace pf::exec
