// Two pipelines over the same ranks (Schedule::pipelines = 2, BitPipe): the exchange of a stage's
// weight gradients with its sibling stage, the same model stage in the other copy of the model.
// ALLREDUCE sends a copy of the stage's gradients (one flat float tensor, message kind
// kStageGradients) and goes on; STEP waits for the sibling's and adds them. Both copies then hold
// g(pipeline 0) + g(pipeline 1), SequentialTrainer's sum for two data-parallel replicas (float
// addition is commutative, so each side adding the other's gives the same bits).
#pragma once

#include <unordered_map>

#include "runtime/comm/transport.h"
#include "runtime/schedules/ir.h"
#include "runtime/train/stage.h"

namespace pf::exec {

class SiblingGradients {
 public:
  // ALLREDUCE(stage): sends a copy of `stage`'s gradients to its sibling's rank (kept here when the
  // sibling is on this rank).
  void send(const sched::Schedule& schedule, int stage, const Stage& weights, comm::Transport& transport,
            double timeout_seconds);
  // STEP(stage): receives the sibling's gradients (kTimeout naming the STEP and the sibling's rank
  // when they do not come) and adds them to `stage`'s.
  void add(const sched::Schedule& schedule, int stage, const Stage& weights, comm::Transport& transport,
           double timeout_seconds);

 private:
  std::unordered_map<int, Tensor> local_;  // [receiving stage]: sent by a sibling on this rank
};

}  // namespace pf::exec
