#include "runtime/execution/tied_gradients.h"

#include "runtime/core/error.h"
#include "runtime/train/trainer.h"

namespace pf::exec {

TiedGradients::TiedGradients(const Model& model, const Model* copy, const ParameterOwnership& ownership)
    : ownership_(&ownership) {
  for (const auto& [primary, tied] : model.tied_pairs()) {
    pairs_.push_back({primary, tied, 0});
    if (ownership.is_local_rank(ownership.owner(primary))) changed_.push_back(primary);
    if (ownership.is_local_rank(ownership.owner(tied))) changed_.push_back(tied);
  }
  if (copy)
    for (const auto& [primary, tied] : copy->tied_pairs()) pairs_.push_back({primary, tied, 1});
}

void TiedGradients::sum(comm::RankGroup& group, double timeout_seconds) const {
  for (const auto& [primary, copy, model_copy] : pairs_) {
    const int p_rank = ownership_->owner(primary), c_rank = ownership_->owner(copy);
    const bool has_p = ownership_->is_local_rank(p_rank), has_c = ownership_->is_local_rank(c_rank);
    if (has_p && has_c) {
      sum_tied_gradients({{primary, copy}});
      continue;
    }
    if (!has_p && !has_c) continue;
    Parameter* mine = has_p ? primary : copy;
    const int me = has_p ? p_rank : c_rank, peer = has_p ? c_rank : p_rank;
    comm::Transport& endpoint = group.endpoint(me);
    Tensor theirs;
    try {
      endpoint.send(peer, comm::MessageKey{comm::MessageKind::kStageGradients, model_copy, peer}, mine->grad.clone(),
                    timeout_seconds);
      theirs = endpoint.recv(peer, comm::MessageKey{comm::MessageKind::kStageGradients, model_copy, me}, timeout_seconds);
    } catch (const Error& e) {
      fail(e.code(), "rank ", me, ": swapping the tied gradient of '", primary->name, "' with rank ", peer, ": ",
           e.what());
    }
    PF_CHECK_ARG(theirs.numel() == mine->grad.numel(), "rank ", me, ": the tied gradient of '", mine->name,
                 "' from rank ", peer, " has ", theirs.numel(), " values, expected ", mine->grad.numel());
    add_replica_gradient(mine->grad.f32(), theirs.f32(), mine->grad.numel());
  }
}

}  // namespace pf::exec
