#include "runtime/execution/rank_executor.h"

#include <algorithm>
#include <thread>
#include <unordered_map>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::exec {

using clock_type = std::chrono::steady_clock;
using comm::MessageKey;
using comm::MessageKind;
using sched::Action;
using sched::ActionKind;

uint64_t context_key(int stage, int micro_batch) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(stage)) << 32) | static_cast<uint32_t>(micro_batch);
}

namespace {

// What a recomputed context keeps between F and RECOMPUTE: the stage input (nothing for the first
// stage of a pipeline, whose input is the caller's micro-batch).
size_t kept_bytes(bool first_stage, const Tensor& input) { return first_stage || !input.defined() ? 0 : input.nbytes(); }


}  // namespace

RankExecutor::RankExecutor(int rank, std::vector<const Stage*> stages, Options options,
                           RankInstruments::Options instruments)
    : rank_(rank), stages_(std::move(stages)), options_(std::move(options)), instruments_(std::move(instruments)) {}

const Stage& RankExecutor::stage(int index) const {
  const Stage* s = index >= 0 && index < static_cast<int>(stages_.size()) ? stages_[static_cast<size_t>(index)] : nullptr;
  PF_INTERNAL_CHECK(s != nullptr, "rank executor: rank ", rank_, " does not run stage ", index);
  return *s;
}

void RankExecutor::set_schedule(const sched::Schedule* schedule) {
  schedule_ = schedule;
  const int S = schedule->num_stages(), m = schedule->num_micro_batches;
  PF_INTERNAL_CHECK(S == static_cast<int>(stages_.size()), "rank executor: schedule has ", S, " stages, the model ",
                    stages_.size());
  recomputed_.assign(static_cast<size_t>(S), {});
  for (const Action& a : schedule->ranks[static_cast<size_t>(rank_)]) {
    // A slice's context holds the keys and values the later slices read, so it stays put and whole.
    if (schedule->seq_slices > 1 && (a.kind == ActionKind::kRecompute || a.kind == ActionKind::kOffload ||
                                     a.kind == ActionKind::kHold))
      fail(ErrorCode::kUnimplemented, "rank executor: schedule '", schedule->name, "' slices sequences (seq_slices ",
           schedule->seq_slices, ") and has ", sched::action_to_string(a),
           "; sequence-sliced schedules run without RECOMPUTE, OFFLOAD or HOLD");
    if (a.kind != ActionKind::kRecompute) continue;
    auto& flags = recomputed_[static_cast<size_t>(a.stage)];
    if (flags.empty()) flags.assign(static_cast<size_t>(m), 0);
    flags[static_cast<size_t>(a.micro_batch)] = 1;
  }
}

const RankExecutor::Handler* RankExecutor::handlers() {
  static const Handler table[sched::kNumActionKinds] = {
      &RankExecutor::on_forward,          // kForward
      &RankExecutor::on_backward,         // kBackwardInput
      &RankExecutor::on_backward_weight,  // kBackwardWeight
      &RankExecutor::on_backward,         // kBackward
      &RankExecutor::on_send_f,           // kSendF
      &RankExecutor::on_recv_f,           // kRecvF
      &RankExecutor::on_send_b,           // kSendB
      &RankExecutor::on_recv_b,           // kRecvB
      &RankExecutor::on_offload,          // kOffload
      &RankExecutor::on_reload,           // kReload
      &RankExecutor::on_recompute,        // kRecompute
      &RankExecutor::on_step,             // kStep
      &RankExecutor::on_allreduce,        // kAllReduce
      &RankExecutor::on_hold,             // kHold
      &RankExecutor::on_return,           // kReturn
      &RankExecutor::on_update,           // kUpdate
      &RankExecutor::on_head,             // kHead
  };
  static_assert(static_cast<int>(ActionKind::kHead) == sched::kNumActionKinds - 1, "one handler per kind");
  return table;
}

RankExecutor::Slot& RankExecutor::slot(const Action& a) {
  return slots_[static_cast<size_t>(a.stage)][static_cast<size_t>(a.micro_batch)];
}

template <typename Body>
void RankExecutor::with_weights(int stage, void (StageWeights::*before)(int64_t),
                                void (StageWeights::*after)(int64_t), int slot, Body body) {
  StageWeights* w = weights(stage);
  if (!w) {
    body();
    return;
  }
  const int64_t e = fill_index(slot);
  (w->*before)(e);
  struct Restore {  // also when `body` throws
    StageWeights* w;
    void (StageWeights::*after)(int64_t);
    int64_t e;
    ~Restore() { (w->*after)(e); }
  } restore{w, after, e};
  body();
}

void RankExecutor::run_step(const std::vector<Batch>& micro_batches, clock_type::time_point t0,
                            comm::Transport& transport, mem::ActivationStore* store,
                            const std::function<std::string()>& cancelled, StepOutput* out) {
  PF_INTERNAL_CHECK(schedule_ != nullptr, "rank executor: no schedule");
  if (!async_) {
    const std::vector<Action>& list = schedule_->ranks[static_cast<size_t>(rank_)];
    // Bubble filling applies to this list only (and only when the budgets were made for it).
    struct Filling {
      bool& on;
      ~Filling() { on = false; }
    } filling{fills_};
    fills_ = true;
    run_actions(list, micro_batches, t0, transport, store, cancelled, out);
    return;
  }
  if (window_ == 0)
    for (StageWeights* w : weights_)
      if (w) w->restart();
  run_actions(async_->step_list(window_, rank_), micro_batches, t0, transport, store, cancelled, out);
  previous_micro_ = micro_batches;  // handles: the slots still in flight read them next step
  ++window_;
}

void RankExecutor::run_evaluation(const sched::Schedule& forward_only, const std::vector<Batch>& micro_batches,
                                  clock_type::time_point t0, comm::Transport& transport,
                                  const std::function<std::string()>& cancelled, StepOutput* out) {
  PF_INTERNAL_CHECK(async_ == nullptr, "rank executor: evaluation of a schedule that never flushes");
  PF_INTERNAL_CHECK(schedule_ != nullptr && forward_only.placement == schedule_->placement,
                    "rank executor: the forward-only schedule has another placement");
  struct Restore {  // the training schedule again, also when an action throws
    RankExecutor* self;
    const sched::Schedule* training;
    ~Restore() {
      self->schedule_ = training;
      self->evaluating_ = false;
    }
  } restore{this, schedule_};
  schedule_ = &forward_only;
  evaluating_ = true;
  run_actions(forward_only.ranks[static_cast<size_t>(rank_)], micro_batches, t0, transport, nullptr, cancelled, out);
}

void RankExecutor::prepare_slots(const std::vector<Action>& actions, int micro_batches) {
  // Asynchronous schedules keep the slots of the micro-batches in flight from one step to the next
  // (two windows of slots); a synchronous step starts empty.
  const bool keep_slots = async_ != nullptr;
  if (keep_slots && !slots_.empty()) return;
  const int S = schedule_->num_stages();
  live_bytes_ = 0;
  live_ = 0;
  const int slots_per_stage = keep_slots ? 2 * async_->micro_batches : micro_batches;
  slots_.clear();
  slots_.resize(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s)
    if (rank_of(s) == rank_) slots_[static_cast<size_t>(s)].resize(static_cast<size_t>(slots_per_stage));
  // A partner rank (balance) keeps the contexts it holds in slots of the owner's stage.
  for (const Action& a : actions)
    if (a.kind == ActionKind::kHold && slots_[static_cast<size_t>(a.stage)].empty())
      slots_[static_cast<size_t>(a.stage)].resize(static_cast<size_t>(slots_per_stage));
}

void RankExecutor::run_action(const std::vector<Action>& actions, size_t i,
                              const std::function<std::string()>& cancelled) {
  const Action& a = actions[i];
  const auto where = [&] {
    return "rank " + std::to_string(rank_) + " at action " + std::to_string(i + 1) + " of " +
           std::to_string(actions.size()) + " (" + sched::action_to_string(a) + ")";
  };
  // Another rank failed. With threads its error is the step's; a process reports that it
  // stopped, so that its own peers stop too.
  if (cancelled) {
    const std::string cause = cancelled();
    if (!cause.empty()) fail(ErrorCode::kCancelled, where(), ": stopped: ", cause);
  }
  instruments_.before(i);
  const auto start = clock_type::now();
  try {
    (this->*handlers()[static_cast<int>(a.kind)])(a);
  } catch (const Error& e) {
    throw Error(e.code(), std::string(e.what()) + " [" + where() + "]");
  }
  instruments_.after(a, start, live_, live_bytes_);
}

void RankExecutor::run_actions(const std::vector<Action>& actions, const std::vector<Batch>& micro_batches,
                               clock_type::time_point t0, comm::Transport& transport, mem::ActivationStore* store,
                               const std::function<std::string()>& cancelled, StepOutput* out) {
  const int m = static_cast<int>(micro_batches.size());
  micro_ = &micro_batches;
  transport_ = &transport;
  store_ = store;
  out_ = out;
  loss_scale_ = options_.loss_scale > 0 ? options_.loss_scale : 1.0f / static_cast<float>(schedule_->num_micro_batches);
  // Windows: the last stage's forwards in a drain (local learning) still record their losses.
  out->losses.assign(static_cast<size_t>(async_ ? async_->micro_batches : m), 0.0f);
  out->correct.assign(evaluating_ ? static_cast<size_t>(m) : 0, 0);
  out->stats = RankStats();
  instruments_.begin(actions.size(), fills_, t0, &out->stats, &out->timed);
  prepare_slots(actions, m);
  for (StageWeights* w : weights_)
    if (w) w->reset_peak();
  struct Clear {  // the slots go at the end of the step (also when an action throws)
    RankExecutor* self;
    bool keep = false;  // asynchronous, and the step completed: its micro-batches stay in flight
    ~Clear() {
      if (!keep) self->slots_.clear();
      self->micro_ = nullptr;
      self->transport_ = nullptr;
      self->store_ = nullptr;
      self->out_ = nullptr;
    }
  } clear{this};
  for (size_t i = 0; i < actions.size(); ++i) run_action(actions, i, cancelled);
  instruments_.end();
  RankStats& rs = out->stats;
  for (StageWeights* w : weights_) {
    if (!w) continue;
    rs.peak_weight_versions += w->peak_versions();
    rs.peak_weight_version_bytes += static_cast<size_t>(w->peak_versions()) * w->version_bytes();
  }
  clear.keep = async_ != nullptr;
}

void RankExecutor::on_evaluation_forward(const Action& a) {
  const int s = a.stage, mb = a.micro_batch;
  const Stage& stage = this->stage(s);
  Slot& sl = slot(a);
  Tensor x = schedule_->first_in_pipeline(s) ? batch_of(mb).inputs : take_input(a, sl);
  PF_INTERNAL_CHECK(x.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " has no input");
  x = stage.forward(std::move(x), sl.ctx);
  sl.ctx.clear();  // no backward follows
  if (stage.has_loss()) {
    const Tensor& targets = batch_of(mb).targets;
    out_->losses[static_cast<size_t>(mb)] = stage.loss_forward(x, targets, 1.0f, sl.loss_ctx);
    out_->correct[static_cast<size_t>(mb)] = stage.count_correct(x, targets);
    sl.loss_ctx.clear();
  } else if (rank_of(s + 1) == rank_) {
    slots_[static_cast<size_t>(s + 1)][static_cast<size_t>(mb)].input = std::move(x);
  } else {
    sl.output = std::move(x);
  }
}

void RankExecutor::on_forward(const Action& a) {
  if (evaluating_) {
    on_evaluation_forward(a);
    return;
  }
  const int s = a.stage, mb = a.micro_batch;
  const int j = async_ ? mb % async_->micro_batches : mb;  // the step's micro-batch
  const Stage& stage = this->stage(s);
  Slot& sl = slot(a);
  Tensor x;
  if (schedule_->first_in_pipeline(s)) {
    x = batch_of(mb).inputs;
  } else {
    x = take_input(a, sl);
    PF_INTERNAL_CHECK(x.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " has no input");
  }
  const auto& flags = recomputed_[static_cast<size_t>(s)];
  const bool recompute = !flags.empty() && flags[static_cast<size_t>(mb)] != 0;
  if (recompute) sl.kept_input = x;
  // Sequence slices: slice k > 0 of a micro-batch attends to the earlier slices' keys and values,
  // which their contexts on this stage hold; its tokens start at k times the slice length.
  const int slice = schedule_->slice_of(mb);
  std::vector<SavedContext>* previous = slice > 0 ? &slots_[static_cast<size_t>(s)][static_cast<size_t>(mb - 1)].ctx : nullptr;
  const int64_t offset = slice > 0 ? slice * x.dim(1) : 0;
  with_weights(s, &StageWeights::before_forward, &StageWeights::after_forward, mb,
               [&] { x = stage.forward(std::move(x), sl.ctx, previous, offset); });
  const bool has_head = static_cast<size_t>(s) < heads_.size() && heads_[static_cast<size_t>(s)] != nullptr;
  if (has_head) sl.head_input = x;  // shared with what goes on to the next stage (read only)
  if (stage.has_loss()) {
    out_->losses[static_cast<size_t>(j)] = stage.loss_forward(x, batch_of(mb).targets, loss_scale_, sl.loss_ctx);
    sl.grad_output = stage.loss_backward(sl.loss_ctx);
  } else if (rank_of(s + 1) == rank_) {
    slots_[static_cast<size_t>(s + 1)][static_cast<size_t>(mb)].input = std::move(x);
  } else {
    sl.output = std::move(x);
  }
  if (recompute) {
    sl.ctx.clear();  // keep only the stage input; RECOMPUTE rebuilds the contexts
    sl.bytes = kept_bytes(schedule_->first_in_pipeline(s), sl.kept_input);
  } else {
    sl.bytes = context_bytes(sl.ctx, &sl.loss_ctx);
  }
  live_bytes_ += sl.bytes;
  live_ += 1;
}

void RankExecutor::on_backward(const Action& a) {
  const bool fused = a.kind == ActionKind::kBackward;
  const int s = a.stage, mb = a.micro_batch;
  const Stage& stage = this->stage(s);
  Slot& sl = slot(a);
  if (store_) store_->restore(context_key(s, mb));  // waits for the prefetch issued by RELOAD
  Tensor dy = take_grad_output(a, sl);
  PF_INTERNAL_CHECK(dy.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " has no output gradient");
  PF_INTERNAL_CHECK(fused || !weights(s), "rank ", rank_, ": ", sched::action_to_string(a),
                    ": asynchronous and local-learning schedules run fused backwards");
  with_weights(s, &StageWeights::before_backward, &StageWeights::after_backward, mb, [&] {
    dy = fused ? stage.backward(sl.ctx, std::move(dy)) : stage.backward_input(sl.ctx, std::move(dy));
  });
  if (!schedule_->first_in_pipeline(s)) {
    if (rank_of(s - 1) == rank_) {
      slots_[static_cast<size_t>(s - 1)][static_cast<size_t>(mb)].grad_output = std::move(dy);
    } else {
      sl.grad_input = std::move(dy);
    }
  }
  live_ -= 1;
  live_bytes_ -= sl.bytes;
  if (fused) {
    sl.ctx.clear();
    sl.bytes = 0;
  } else {
    // What W needs can be more than F kept (e.g. the output gradient saved for an embedding's or
    // the head's W): the peak can rise at B too.
    sl.bytes = context_bytes(sl.ctx, &sl.loss_ctx);
    live_bytes_ += sl.bytes;
  }
  // Sequence slices: the backward added key/value gradients to the earlier slices' contexts.
  for (int k = 1; k <= schedule_->slice_of(mb); ++k) {
    Slot& earlier = slots_[static_cast<size_t>(s)][static_cast<size_t>(mb - k)];
    live_bytes_ -= earlier.bytes;
    earlier.bytes = context_bytes(earlier.ctx, &earlier.loss_ctx);
    live_bytes_ += earlier.bytes;
  }
}

void RankExecutor::on_backward_weight(const Action& a) {
  Slot& sl = slot(a);
  stage(a.stage).backward_weight(sl.ctx);
  live_bytes_ -= sl.bytes;
  sl.bytes = 0;
  sl.ctx.clear();
}

void RankExecutor::on_recompute(const Action& a) {
  // Rerun the stage forward on the kept input: same layers, kernels and input as F, so the
  // contexts are bitwise those F built. The output (and the loss) is not needed again.
  Slot& sl = slot(a);
  Tensor x = sl.kept_input.defined() ? std::move(sl.kept_input) : batch_of(a.micro_batch).inputs;
  sl.kept_input = Tensor();
  PF_INTERNAL_CHECK(x.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " has no kept input");
  const Stage& stage = this->stage(a.stage);
  with_weights(a.stage, &StageWeights::before_recompute, &StageWeights::after_recompute, a.micro_batch,
               [&] { stage.forward(std::move(x), sl.ctx); });
  live_bytes_ -= sl.bytes;
  sl.bytes = context_bytes(sl.ctx);
  live_bytes_ += sl.bytes;
  out_->stats.recomputes += 1;
}

}  // namespace pf::exec
