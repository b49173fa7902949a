// Checks a schedule before anything runs it (see docs/SCHEDULES.md, "Validator"):
//  1. shape: ranks, stages, micro-batches, placement (map in range and matching its kind);
//  2. every action: known kind, stage and micro-batch in range, on the rank that holds its stage,
//     communication only between stages on different ranks and in a direction that exists;
//  3. completeness and local order: per (micro-batch, stage) exactly one F and either one B and one W
//     or one BW, F before B before W (F before BW) on that rank; RECOMPUTE / OFFLOAD / RELOAD between
//     the F and the backward; STEP and ALLREDUCE at most once per stage, after its last W/BW;
//     with seq_slices S > 1, S divides the units and on every stage F(u) runs after F(u - 1) and
//     the backward of u - 1 after that of u, for units u = mb * S + j with j > 0;
//  4. communication (when the schedule has any SEND/RECV, i.e. is lowered): every cross-rank
//     dependency has its SEND after the producer and its RECV before the consumer, and every
//     SEND/RECV has its partner;
//  5. deadlock: the schedule is executed symbolically, ranks in order, under the chosen
//     communication semantics (comm_semantics.h). Rendezvous (the default): a SEND/RECV pair as a
//     rendezvous (each blocks until the other is posted) and, for a compute action, its producer on
//     another stage finished (infinite buffering when the schedule is not lowered). Posted: SENDs and
//     RECVs never block; a compute action whose input comes through a RECV on its rank waits for the
//     matching SEND to have run on the peer. The report says which model it checked.
// Later checks run only when earlier ones pass, so each reported error is a root cause.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/ir.h"

namespace pf::sched {

struct ValidationIssue {
  int rank = -1;        // the rank of the offending action, -1 for schedule-wide issues
  int index = -1;       // its position in that rank's list, -1 when no action is involved
  std::string action;   // its text, e.g. "1B3" ("" when none)
  std::string message;  // the rule it breaks / the dependency it waits for
  std::string to_string() const;  // "rank 1, action 4 (1B3): <message>"
};

struct ValidationReport {
  std::vector<ValidationIssue> errors;  // at most kMaxErrors; `more_errors` counts the rest
  int more_errors = 0;
  // Facts worth knowing that are not errors, e.g. a stage whose weight gradients do not accumulate
  // in micro-batch order (bitwise equality with the sequential reference needs that order).
  std::vector<std::string> notes;
  bool lowered = false;  // the schedule has SEND/RECV actions
  // The model the deadlock check ran under; a lowered schedule reported ok is deadlock-free under it
  // (and, for kRendezvous, under any buffering).
  CommSemantics comm = CommSemantics::kRendezvous;
  std::string grid;      // the schedule grid with the first error's action(s) marked; "" when ok

  static constexpr int kMaxErrors = 20;
  bool ok() const { return errors.empty(); }
  // All errors, one per line, then the grid.
  std::string to_string() const;
};

struct ValidationOptions {
  CommSemantics comm = CommSemantics::kRendezvous;  // the model of the deadlock check
};

ValidationReport validate(const Schedule& schedule, const ValidationOptions& options = {});

// Throws pf::Error(kInvalidArgument) whose message is "invalid schedule '<name>': " plus the report.
void validate_or_throw(const Schedule& schedule, const ValidationOptions& options = {});

// The semantics an executor needs to run `schedule`: kRendezvous when it is valid under rendezvous
// send/recv, else kPosted when it is valid with posted ones (PyTorch's deferred receives); else
// throws validate_or_throw's rendezvous error.
CommSemantics communication_semantics(const Schedule& schedule);

// The micro-batches in the order their weight gradients (W, or BW) of `stage` run: this is the
// order in which the stage's gradients accumulate. Empty when the stage has none.
std::vector<int> weight_gradient_order(const Schedule& schedule, int stage);
// The order of the sequential reference: the micro-batches of the stage's pipeline ascending, and
// with sequence slices each micro-batch's slices last first (their backwards must run so). A stage
// whose weight_gradient_order differs accumulates in another order (the validator notes it; the
// result then differs from the reference in the last bits).
std::vector<int> reference_weight_gradient_order(const Schedule& schedule, int stage);

// ---- Indexing shared by the validator, the lowering pass and the simulator.

struct ActionSlot {
  int rank = -1;
  int index = -1;  // position in ranks[rank]
};

// Occurrences of every (kind, stage, micro-batch) in a schedule. Actions whose stage or micro-batch
// is out of range (or whose kind is invalid) are not indexed; the validator reports them.
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& schedule);

  // Every occurrence, in rank then index order (more than one = a duplicate).
  const std::vector<ActionSlot>& occurrences(ActionKind kind, int stage, int micro_batch) const;
  // The first occurrence, or nullptr.
  const ActionSlot* find(ActionKind kind, int stage, int micro_batch) const;
  const ActionSlot* find(const Action& a) const { return find(a.kind, a.stage, a.micro_batch); }

  int num_stages() const { return stages_; }
  int num_micro_batches() const { return micro_batches_; }
  // The schedule's pipelines (Schedule::pipelines): where each chain of stages starts and ends.
  int pipelines() const { return pipelines_; }
  int stages_per_pipeline() const { return per_pipeline_; }
  bool first_in_pipeline(int stage) const { return stage % per_pipeline_ == 0; }
  bool last_in_pipeline(int stage) const { return stage % per_pipeline_ == per_pipeline_ - 1; }
  int sibling_stage(int stage) const { return stage < per_pipeline_ ? stage + per_pipeline_ : stage - per_pipeline_; }

 private:
  size_t key(ActionKind kind, int stage, int micro_batch) const;
  int stages_ = 0;
  int micro_batches_ = 0;
  int pipelines_ = 1;
  int per_pipeline_ = 1;  // stages per pipeline (>= 1)
  std::vector<std::vector<ActionSlot>> slots_;
};

// The action of a neighbouring stage whose output `action` consumes (the one of action_needs,
// dependencies.h, on another stage, in the schedule as if unlowered):
//   F(mb, s)      <- F(mb, s-1)                      (none for the first stage of a pipeline)
//   B/BW(mb, s)   <- the B, else the BW, of (mb, s+1)  (none for the last stage of a pipeline)
//   STEP(s)       <- ALLREDUCE(sibling of s)          (two pipelines: it adds the sibling's gradients)
// RECOMPUTE has the same input as F but reuses the kept stage input, so it has none; so do all
// other kinds. When the producer is absent from the schedule the B form is returned for B/BW.
std::optional<Action> stage_dependency(const ActionIndex& index, const Action& action);

// What `action` waits for when it runs (the executor's blocking rule, used by the deadlock check):
// stage_dependency, plus HOLD(mb, s) <- OFFLOAD(mb, s) and RELOAD(mb, s) <- RETURN(mb, s) when the
// schedule has that RETURN (activations held by a partner rank, policy balance).
std::optional<Action> waits_for_action(const ActionIndex& index, const Action& action);

// What `action` on `rank` waits for under kPosted: the SEND matching the delivering_recv of the
// action when that RECV is on `rank` (a lowered schedule), else waits_for_action.
std::optional<Action> posted_waits_for(const ActionIndex& index, const Action& action, int rank);

// Runs every rank's list under the validator's blocking rules as far as it can. kRendezvous: SEND/RECV
// pairs rendezvous, other actions wait for waits_for_action. kPosted: SEND/RECV never block, other
// actions wait for posted_waits_for. Per rank: the index it stops at (the list size when it
// finishes). Any rank short of its end means a deadlock.
std::vector<int> progress_until_blocked(const Schedule& schedule, const ActionIndex& index,
                                        CommSemantics comm = CommSemantics::kRendezvous);

}  // namespace pf::sched
