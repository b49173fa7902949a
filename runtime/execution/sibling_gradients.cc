#include "runtime/execution/sibling_gradients.h"

#include <cstring>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/train/trainer.h"

namespace pf::exec {
namespace {

int64_t gradient_numel(const Stage& weights) {
  int64_t n = 0;
  for (const Parameter* p : weights.parameters()) n += p->grad.numel();
  return n;
}

comm::MessageKey key_for(int receiving_stage) {
  return comm::MessageKey{comm::MessageKind::kStageGradients, 0, receiving_stage};
}

}  // namespace

void SiblingGradients::send(const sched::Schedule& schedule, int stage, const Stage& weights,
                            comm::Transport& transport, double timeout_seconds) {
  const int sibling = schedule.sibling_stage(stage);
  Tensor flat = Tensor::empty({gradient_numel(weights)}, DType::kF32);
  float* out = flat.f32();
  for (const Parameter* p : weights.parameters()) {
    std::memcpy(out, p->grad.f32(), static_cast<size_t>(p->grad.numel()) * sizeof(float));
    out += p->grad.numel();
  }
  const int to = schedule.placement.rank_of(sibling);
  if (to == transport.rank()) {
    local_[sibling] = std::move(flat);
  } else {
    transport.send(to, key_for(sibling), std::move(flat), timeout_seconds);
  }
}

void SiblingGradients::add(const sched::Schedule& schedule, int stage, const Stage& weights,
                           comm::Transport& transport, double timeout_seconds) {
  const int sibling = schedule.sibling_stage(stage);
  const int from = schedule.placement.rank_of(sibling);
  Tensor other;
  if (from == transport.rank()) {
    auto it = local_.find(stage);
    PF_INTERNAL_CHECK(it != local_.end(), "rank ", transport.rank(), ": ", stage, "STEP before its sibling's ",
                      sibling, "ALLREDUCE");
    other = std::move(it->second);
    local_.erase(it);
  } else {
    other = transport.recv(from, key_for(stage), timeout_seconds);
  }
  PF_CHECK_ARG(other.numel() == gradient_numel(weights), "rank ", transport.rank(), ": ", stage, "STEP got ",
               other.numel(), " gradient values from stage ", sibling, " on rank ", from, ", expected ",
               gradient_numel(weights));
  const float* in = other.f32();
  for (Parameter* p : weights.parameters()) {
    add_replica_gradient(p->grad.f32(), in, p->grad.numel());
    in += p->grad.numel();
  }
}

}  // namespace pf::exec
