// What an action waits for, written once: the simulator times a schedule with it, the validator's
// deadlock check and lowering take the neighbouring stage's producer from it (stage_dependency).
//
// action_needs(a on `rank`) lists the producers `a` waits for:
//   F(mb, s)        its input: RECV_F(mb, s) when this rank has it (posted: that RECV and the matching
//                   SEND_F, else F(mb, s-1)), else F(mb, s-1); nothing for a pipeline's first stage.
//                   Sequence slices: also F of the slice before (same stage).
//   B/BW(mb, s)     F(mb, s); the output gradient: HEAD(mb, s) (local learning), RECV_B(mb, s) on this
//                   rank (posted as for F), else the B (or, without one, the BW) of (mb, s+1); nothing
//                   for a pipeline's last stage; RECOMPUTE and RELOAD of (mb, s) when present.
//                   Sequence slices: also the backward of the slice after (same stage).
//   W               B.   SEND_F: F.   SEND_B: the B (or BW) of its stage.
//   RECV_F, RECV_B  rendezvous only: the matching SEND (else its producer); posted receives never wait.
//   RECOMPUTE, OFFLOAD, HEAD: F.   RELOAD: OFFLOAD, and RETURN when present.   HOLD: OFFLOAD.
//   RETURN: HOLD.   UPDATE: the W and BW of (mb, s) that are present.
//   STEP, ALLREDUCE: every W and BW of the stage that is present; STEP also its own ALLREDUCE and,
//                   with two pipelines, its sibling stage's.
// A producer is required (the schedule must have it) or, where "when present" says so, added only
// when the schedule has it.
#pragma once

#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/ir.h"

namespace pf::sched {

// What action_needs reads of a schedule besides where its actions are.
struct ScheduleShape {
  int micro_batches = 0;
  int seq_slices = 1;
  int pipelines = 1;
  int stages_per_pipeline = 1;
  bool first_in_pipeline(int stage) const { return stage % stages_per_pipeline == 0; }
  bool last_in_pipeline(int stage) const { return stage % stages_per_pipeline == stages_per_pipeline - 1; }
  int sibling_stage(int stage) const {
    return stage % (2 * stages_per_pipeline) < stages_per_pipeline ? stage + stages_per_pipeline
                                                                    : stage - stages_per_pipeline;
  }
  static ScheduleShape of(const Schedule& s) {
    return {s.num_micro_batches, s.seq_slices, s.pipelines, s.stages_per_pipeline()};
  }
};

// Calls need(producer) for every producer `a` (run by `rank`) waits for. `rank_of(kind, stage,
// micro_batch)` is the rank that runs an action, or -1 when the schedule lacks it (so `rank` must not
// be -1);
// need(producer) is called for a required producer even when the schedule lacks it (the caller
// reports that), and for an optional one only when it is present.
template <typename RankOf, typename Need>
void action_needs(const ScheduleShape& shape, const RankOf& rank_of, int rank, const Action& a, CommSemantics comm,
                  const Need& need) {
  const int s = a.stage, mb = a.micro_batch;
  const auto present = [&](ActionKind kind, int stage, int micro_batch) { return rank_of(kind, stage, micro_batch) >= 0; };
  const auto if_present = [&](ActionKind kind, int stage, int micro_batch) {
    if (present(kind, stage, micro_batch)) need(Action{kind, stage, micro_batch});
  };
  // The producer of the input gradient of (mb, stage): its B, else its BW.
  const auto grad_producer = [&](int stage) {
    need(Action{present(ActionKind::kBackwardInput, stage, mb) ? ActionKind::kBackwardInput : ActionKind::kBackward,
                stage, mb});
  };
  const auto recv_on_rank = [&](ActionKind kind) { return rank_of(kind, s, mb) == rank; };
  const bool posted = comm == CommSemantics::kPosted;
  // Posted: the consumer of a RECV on its rank needs the RECV posted and the matching SEND's data
  // (else the producer's output).
  const auto posted_input = [&](ActionKind recv_kind, int send_stage, ActionKind send_kind, const auto& producer) {
    need(Action{recv_kind, s, mb});
    if (present(send_kind, send_stage, mb)) need(Action{send_kind, send_stage, mb});
    else producer();
  };
  // Sliced schedules: slice j's F reads the keys/values of slice j - 1's F on this stage; its
  // backward waits for the backward of slice j + 1, which adds to its key/value gradients.
  const int slice = shape.seq_slices > 1 && mb >= 0 ? mb % shape.seq_slices : 0;
  if (shape.seq_slices > 1 && mb >= 0) {
    if (a.kind == ActionKind::kForward && slice > 0) need(Action{ActionKind::kForward, s, mb - 1});
    if ((a.kind == ActionKind::kBackwardInput || a.kind == ActionKind::kBackward) && slice + 1 < shape.seq_slices)
      need(Action{present(ActionKind::kBackwardInput, s, mb + 1) ? ActionKind::kBackwardInput : ActionKind::kBackward,
                  s, mb + 1});
  }
  switch (a.kind) {
    case ActionKind::kForward:
      if (shape.first_in_pipeline(s)) break;
      if (posted && recv_on_rank(ActionKind::kRecvF))
        posted_input(ActionKind::kRecvF, s - 1, ActionKind::kSendF, [&] { need(Action{ActionKind::kForward, s - 1, mb}); });
      else if (recv_on_rank(ActionKind::kRecvF)) need(Action{ActionKind::kRecvF, s, mb});
      else need(Action{ActionKind::kForward, s - 1, mb});
      break;
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      need(Action{ActionKind::kForward, s, mb});
      if (present(ActionKind::kHead, s, mb)) {
        need(Action{ActionKind::kHead, s, mb});  // local learning: the stage's own head gives the gradient
      } else if (!shape.last_in_pipeline(s)) {
        if (posted && recv_on_rank(ActionKind::kRecvB))
          posted_input(ActionKind::kRecvB, s + 1, ActionKind::kSendB, [&] { grad_producer(s + 1); });
        else if (recv_on_rank(ActionKind::kRecvB)) need(Action{ActionKind::kRecvB, s, mb});
        else grad_producer(s + 1);
      }
      if_present(ActionKind::kRecompute, s, mb);
      if_present(ActionKind::kReload, s, mb);
      break;
    case ActionKind::kBackwardWeight:
      need(Action{ActionKind::kBackwardInput, s, mb});
      break;
    case ActionKind::kSendF:
      need(Action{ActionKind::kForward, s, mb});
      break;
    case ActionKind::kSendB:
      grad_producer(s);
      break;
    case ActionKind::kRecvF:
      if (shape.first_in_pipeline(s) || posted) break;
      if (present(ActionKind::kSendF, s - 1, mb)) need(Action{ActionKind::kSendF, s - 1, mb});
      else need(Action{ActionKind::kForward, s - 1, mb});
      break;
    case ActionKind::kRecvB:
      if (shape.last_in_pipeline(s) || posted) break;
      if (present(ActionKind::kSendB, s + 1, mb)) need(Action{ActionKind::kSendB, s + 1, mb});
      else grad_producer(s + 1);
      break;
    case ActionKind::kRecompute:
    case ActionKind::kOffload:
    case ActionKind::kHead:
      need(Action{ActionKind::kForward, s, mb});
      break;
    case ActionKind::kReload:
      need(Action{ActionKind::kOffload, s, mb});
      if_present(ActionKind::kReturn, s, mb);  // held by a partner rank: wait until it sends them back
      break;
    case ActionKind::kHold:
      need(Action{ActionKind::kOffload, s, mb});
      break;
    case ActionKind::kReturn:
      need(Action{ActionKind::kHold, s, mb});
      break;
    case ActionKind::kUpdate:
      if_present(ActionKind::kBackwardWeight, s, mb);
      if_present(ActionKind::kBackward, s, mb);
      break;
    case ActionKind::kStep:
    case ActionKind::kAllReduce:
      for (int j = 0; j < shape.micro_batches; ++j) {
        if_present(ActionKind::kBackwardWeight, s, j);
        if_present(ActionKind::kBackward, s, j);
      }
      if (a.kind == ActionKind::kStep) if_present(ActionKind::kAllReduce, s, -1);
      // Two pipelines: STEP adds the gradients its sibling stage's ALLREDUCE sent.
      if (a.kind == ActionKind::kStep && shape.pipelines > 1) if_present(ActionKind::kAllReduce, shape.sibling_stage(s), -1);
      break;
  }
}

}  // namespace pf::sched
