// The rank executor's handlers that move things rather than compute: activations and gradients
// to and from the neighbouring stages (SEND/RECV, posted or at once), contexts to the activation
// store and back (OFFLOAD/RELOAD) or to a partner rank (HOLD/RETURN), and the sibling and
// data-parallel gradient exchanges of STEP and ALLREDUCE.
#include <string>

#include "runtime/core/error.h"
#include "runtime/execution/rank_executor.h"
#include "runtime/execution/stage_message_slices.h"

namespace pf::exec {

using comm::MessageKey;
using comm::MessageKind;
using sched::Action;

Tensor RankExecutor::outgoing(Tensor message) {
  if (options_.tensor_parallel) message = slice_message(message, *options_.tensor_parallel);
  out_->stats.sent_bytes += static_cast<int64_t>(message.nbytes());
  return message;
}

Tensor RankExecutor::incoming(Tensor message, const Action& a) {
  if (!options_.tensor_parallel) return message;
  return gather_slice_message(message, *options_.tensor_parallel,
                              "rank " + std::to_string(rank_) + " " + sched::action_to_string(a));
}

void RankExecutor::on_send_f(const Action& a) {
  Slot& sl = slot(a);
  transport_->send(rank_of(a.stage + 1), MessageKey{MessageKind::kActivation, a.micro_batch, a.stage + 1},
                   outgoing(std::move(sl.output)), options_.timeout_seconds);
  sl.output = Tensor();
}

Tensor RankExecutor::receive_input(const Action& a) {
  return incoming(transport_->recv(rank_of(a.stage - 1), MessageKey{MessageKind::kActivation, a.micro_batch, a.stage},
                                   options_.timeout_seconds),
                  a);
}

void RankExecutor::on_recv_f(const Action& a) {
  Slot& sl = slot(a);
  if (options_.posted_receives) {
    sl.input_posted = true;
  } else {
    sl.input = receive_input(a);
  }
}

Tensor RankExecutor::take_input(const Action& a, Slot& sl) {
  if (!sl.input_posted) return std::move(sl.input);
  sl.input_posted = false;
  return receive_input(a);
}

void RankExecutor::on_send_b(const Action& a) {
  Slot& sl = slot(a);
  transport_->send(rank_of(a.stage - 1), MessageKey{MessageKind::kGradient, a.micro_batch, a.stage - 1},
                   outgoing(std::move(sl.grad_input)), options_.timeout_seconds);
  sl.grad_input = Tensor();
}

Tensor RankExecutor::receive_grad_output(const Action& a) {
  return incoming(transport_->recv(rank_of(a.stage + 1), MessageKey{MessageKind::kGradient, a.micro_batch, a.stage},
                                   options_.timeout_seconds),
                  a);
}

void RankExecutor::on_recv_b(const Action& a) {
  Slot& sl = slot(a);
  if (options_.posted_receives) {
    sl.grad_output_posted = true;
  } else {
    sl.grad_output = receive_grad_output(a);
  }
}

Tensor RankExecutor::take_grad_output(const Action& a, Slot& sl) {
  if (!sl.grad_output_posted) return std::move(sl.grad_output);
  sl.grad_output_posted = false;
  return receive_grad_output(a);
}

void RankExecutor::on_offload(const Action& a) {
  Slot& sl = slot(a);
  PF_INTERNAL_CHECK(store_ != nullptr, "rank ", rank_, ": ", sched::action_to_string(a), " without a store");
  std::vector<SavedContext*> ctxs;
  for (auto& c : sl.ctx) ctxs.push_back(&c);
  store_->offload(context_key(a.stage, a.micro_batch), std::move(ctxs));
  live_ -= 1;
  live_bytes_ -= sl.bytes;
}

void RankExecutor::on_reload(const Action& a) {
  Slot& sl = slot(a);
  PF_INTERNAL_CHECK(store_ != nullptr, "rank ", rank_, ": ", sched::action_to_string(a), " without a store");
  store_->prefetch(context_key(a.stage, a.micro_batch));  // asynchronous; the B/BW that needs it waits
  live_ += 1;
  live_bytes_ += sl.bytes;
}

void RankExecutor::on_hold(const Action& a) {
  // Keep the owner's packed activations until RETURN, charged by the image's bytes (the owner's
  // context bytes: the image packs exactly the byte ranges its tensors cover).
  Slot& sl = slot(a);
  sl.held = transport_->recv(rank_of(a.stage), MessageKey{MessageKind::kContextOut, a.micro_batch, a.stage},
                             options_.timeout_seconds);
  live_ += 1;
  live_bytes_ += sl.held.nbytes();
}

void RankExecutor::on_return(const Action& a) {
  Slot& sl = slot(a);
  PF_INTERNAL_CHECK(sl.held.defined(), "rank ", rank_, ": ", sched::action_to_string(a), " holds nothing");
  live_ -= 1;
  live_bytes_ -= sl.held.nbytes();
  transport_->send(rank_of(a.stage), MessageKey{MessageKind::kContextBack, a.micro_batch, a.stage},
                   std::move(sl.held), options_.timeout_seconds);
  sl.held = Tensor();
}

void RankExecutor::on_step(const Action& a) {
  // The optimizer runs once every rank has finished (PipelineTrainer::run_step: the workers' second
  // phase, or the calling thread). Two pipelines:
  // the stage adds the gradients its sibling sent (sibling_gradients.h).
  if (schedule_->pipelines > 1)
    siblings_.add(*schedule_, a.stage, stage(a.stage), *transport_, options_.timeout_seconds);
}

void RankExecutor::on_allreduce(const Action& a) {
  if (schedule_->pipelines > 1) {
    siblings_.send(*schedule_, a.stage, stage(a.stage), *transport_, options_.timeout_seconds);
  } else if (options_.on_allreduce) {
    options_.on_allreduce(a.stage);
  }
}

}  // namespace pf::exec
