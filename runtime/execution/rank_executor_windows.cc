// The rank executor's side of the schedules that never flush (asynchronous and local learning):
// the step windows and the weight versions of its stages, which micro-batch a slot of the previous
// window holds, the drain, HEAD (a local auxiliary head) and UPDATE (a stage's own optimizer step).
#include "runtime/core/error.h"
#include "runtime/execution/rank_executor.h"

namespace pf::exec {

using clock_type = std::chrono::steady_clock;
using sched::Action;
using sched::ActionKind;

void RankExecutor::set_async(const sched::StepWindows* windows, std::vector<StageWeights*> weights) {
  PF_INTERNAL_CHECK(windows != nullptr && static_cast<int>(weights.size()) == schedule_->num_stages(),
                    "rank executor: asynchronous windows without weights for every stage");
  async_ = windows;
  weights_ = std::move(weights);
  for (int s = 0; s < static_cast<int>(weights_.size()); ++s)
    if (rank_of(s) != rank_) weights_[static_cast<size_t>(s)] = nullptr;  // another rank's stage
  window_ = 0;
  // RECOMPUTE flags by window slot.
  const size_t r = static_cast<size_t>(rank_);
  recomputed_.assign(static_cast<size_t>(schedule_->num_stages()), {});
  for (const auto* lists : {&windows->first, &windows->steady[0], &windows->steady[1], &windows->drain[0],
                            &windows->drain[1]})
    for (const Action& a : (*lists)[r]) {
      if (a.kind != ActionKind::kRecompute) continue;
      auto& flags = recomputed_[static_cast<size_t>(a.stage)];
      if (flags.empty()) flags.assign(static_cast<size_t>(2 * windows->micro_batches), 0);
      flags[static_cast<size_t>(a.micro_batch)] = 1;
    }
}

StageWeights* RankExecutor::weights(int stage) const {
  if (!async_) return nullptr;
  StageWeights* w = weights_[static_cast<size_t>(stage)];
  PF_INTERNAL_CHECK(w != nullptr, "rank ", rank_, ": no weights for stage ", stage);
  return w;
}

const Batch& RankExecutor::batch_of(int slot) const {
  if (!async_) return (*micro_)[static_cast<size_t>(slot)];
  const int m = async_->micro_batches;
  const std::vector<Batch>& from = in_this_step(slot) ? *micro_ : previous_micro_;
  PF_INTERNAL_CHECK(static_cast<size_t>(slot % m) < from.size(), "rank ", rank_, ": no micro-batch for slot ", slot);
  return from[static_cast<size_t>(slot % m)];
}

bool RankExecutor::in_this_step(int slot) const {
  return slot / async_->micro_batches == static_cast<int>(window_ % 2);
}

int64_t RankExecutor::fill_index(int slot) const {
  const int m = async_->micro_batches;
  return (in_this_step(slot) ? window_ : window_ - 1) * m + slot % m;
}

void RankExecutor::run_drain(clock_type::time_point t0, comm::Transport& transport,
                             const std::function<std::string()>& cancelled, StepOutput* out) {
  PF_INTERNAL_CHECK(async_ != nullptr, "rank executor: drain of a synchronous schedule");
  const std::vector<Batch> none;
  if (window_ == 0) {
    run_actions({}, none, t0, transport, nullptr, cancelled, out);
    return;
  }
  run_actions(async_->drain[(window_ - 1) % 2][static_cast<size_t>(rank_)], none, t0, transport, nullptr, cancelled,
              out);
  window_ = 0;
  slots_.clear();
  previous_micro_.clear();
}

void RankExecutor::on_head(const Action& a) {
  const Stage* head = static_cast<size_t>(a.stage) < heads_.size() ? heads_[static_cast<size_t>(a.stage)] : nullptr;
  PF_INTERNAL_CHECK(head != nullptr, "rank ", rank_, ": ", sched::action_to_string(a), " without a local head");
  Slot& sl = slot(a);
  Tensor x = std::move(sl.head_input);
  sl.head_input = Tensor();
  PF_INTERNAL_CHECK(x.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " has no stage output");
  // The head's forward, loss and backward (its weight gradients accumulate); the gradient of the
  // stage output is what the stage's BW starts from.
  std::vector<SavedContext> contexts;
  SavedContext loss_context;
  const Tensor logits = head->forward(std::move(x), contexts);
  head->loss_forward(logits, batch_of(a.micro_batch).targets, loss_scale_, loss_context);
  sl.grad_output = head->backward(contexts, head->loss_backward(loss_context));
}

void RankExecutor::on_update(const Action& a) {
  StageWeights* w = weights(a.stage);
  PF_INTERNAL_CHECK(w != nullptr, "rank ", rank_, ": ", sched::action_to_string(a),
                    " outside an asynchronous schedule");
  w->update(fill_index(a.micro_batch));
}

}  // namespace pf::exec
