// The schedule IR: per-rank ordered action lists plus a stage-to-rank placement. Every generator
// emits it, the validator checks it, the simulator times it, the renderers draw it and the executor
// runs it. Nothing here is schedule-specific. See docs/SCHEDULES.md (and ../shared/docs/SCHEDULES.md).
//
// Vocabulary: a *stage* is one model chunk (the model is split into num_stages consecutive
// stages); a *rank* is one device/worker, holding one or more stages (the placement).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "runtime/schedules/schedule_traits.h"

namespace pf::sched {

enum class ActionKind : int {
  kForward = 0,         // F(mb, stage)
  kBackwardInput = 1,   // B(mb, stage): gradient w.r.t. the stage input
  kBackwardWeight = 2,  // W(mb, stage): gradient w.r.t. the stage weights
  kBackward = 3,        // BW(mb, stage): fused full backward (= B then W)
  kSendF = 4,           // send the output activation of (mb, stage) to stage + 1
  kRecvF = 5,           // receive the input activation of (mb, stage) from stage - 1
  kSendB = 6,           // send the input gradient of (mb, stage) to stage - 1
  kRecvB = 7,           // receive the output gradient of (mb, stage) from stage + 1
  kOffload = 8,         // move the saved activations of (mb, stage) off the device
  kReload = 9,          // bring them back
  kRecompute = 10,      // rerun F(mb, stage) from the kept stage input, before its backward
  kStep = 11,           // optimizer step of `stage` (sync schedules: once, after its last W)
  kAllReduce = 12,      // data-parallel gradient reduction of `stage`
  // Cross-stage balancing (BPipe, policy "balance"): the OFFLOAD of (mb, stage) sends its saved
  // activations to a partner rank instead of host memory or a file.
  kHold = 13,           // on the partner rank: receive the offloaded activations of (mb, stage) and keep them
  kReturn = 14,         // on the partner rank: send them back to the owner, whose RELOAD receives them
  // Asynchronous schedules (pipedream, pipedream-2bw, spectrain, pipemare): an optimizer update of
  // `stage` with the gradients accumulated since its previous UPDATE, right after the backward of
  // micro-batch `mb` (per micro-batch; no flush, no STEP).
  kUpdate = 15,
  // Local learning (ppll, local-updates): the auxiliary head of `stage` on its output for
  // micro-batch `mb`, its loss and the gradient that the stage's own backward then uses instead of
  // one from the next stage (no gradient crosses ranks). Not on the last stage (the model's loss).
  kHead = 16,
};
constexpr int kNumActionKinds = 17;

// Text names as in the compact form: "F", "B", "W", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B",
// "OFFLOAD", "RELOAD", "RECOMPUTE", "STEP", "ALLREDUCE", "HOLD", "RETURN", "UPDATE", "HEAD".
const char* action_kind_name(ActionKind kind);
bool is_compute(ActionKind kind);        // F, B, W, BW, RECOMPUTE
// F, B, W, BW: the kinds among which an F with overlaps_next finds its partner, the next one on its
// rank (a RECOMPUTE, like memory actions and transfers, may run between the two halves).
bool is_pass(ActionKind kind);
bool is_communication(ActionKind kind);  // SEND_*, RECV_*
// OFFLOAD, RELOAD: copies the executor hands to the activation store's copy worker; the simulator
// runs them on the rank's copy lane, beside its compute, and the renderers draw them there.
bool is_background_copy(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int micro_batch = -1;  // -1 for STEP and ALLREDUCE (they act on the whole stage)
  // PyTorch's OVERLAP_F_B compound action (dualpipe-v): set on an F, it and the next F, B, W or BW of
  // its rank, which must be a B or BW, are one action, run back to back (transfers, memory actions
  // and a RECOMPUTE placed between them run in between). Text "2F3+"; the validator checks the
  // partner.
  bool overlaps_next = false;

  bool operator==(const Action& o) const {
    return kind == o.kind && stage == o.stage && micro_batch == o.micro_batch && overlaps_next == o.overlaps_next;
  }
  bool operator!=(const Action& o) const { return !(*this == o); }
};

// The index of the first F, B, W or BW after index i of `list` (an overlapped F's partner), or
// list.size() when there is none.
size_t next_pass(const std::vector<Action>& list, size_t i);

// Compact text of one action, PyTorch style: "<stage><KIND><mb>", e.g. "2F0", "1B3", "0W5",
// "1SEND_F2", "3BW1"; STEP and ALLREDUCE carry only the stage: "2STEP", "0ALLREDUCE"; an F that
// overlaps the next compute action (Action::overlaps_next) ends in '+': "2F0+".
std::string action_to_string(const Action& action);
// Parses one action; throws pf::Error kInvalidArgument naming the text.
Action parse_action(const std::string& text);

struct Placement {
  enum class Kind { kOnePerRank, kLooped, kVShape, kCustom } kind = Kind::kOnePerRank;
  int num_ranks = 0;
  std::vector<int> stage_to_rank;  // size = num_stages

  int num_stages() const { return static_cast<int>(stage_to_rank.size()); }
  int rank_of(int stage) const { return stage_to_rank.at(static_cast<size_t>(stage)); }
  // Stages of a rank in ascending order.
  std::vector<int> stages_of(int rank) const;

  // p ranks, p stages, stage s on rank s.
  static Placement one_per_rank(int ranks);
  // p ranks, p*v stages, stage c*p + d on rank d (Megatron interleaving / looped BFS).
  static Placement looped(int ranks, int chunks);
  // p ranks, 2p stages, rank s holds stages s and 2p-1-s (ZB-V).
  static Placement v_shape(int ranks);
  // Any stage -> rank map (kind kCustom); checks that every entry names a rank in [0, ranks).
  static Placement custom(int ranks, std::vector<int> stage_to_rank);
};

// Text names of the placement kinds: "one-per-rank", "looped", "v-shape", "custom".
const char* placement_kind_name(Placement::Kind kind);
// The kind whose formula gives exactly this map (one-per-rank, then looped, then v-shape), else
// kCustom. (With one rank and two stages looped and v-shape coincide; looped wins.)
Placement::Kind classify_placement(int ranks, const std::vector<int>& stage_to_rank);
// True when the map is what `kind`'s formula gives for `ranks` (always true for kCustom).
bool placement_matches_kind(const Placement& placement);

// False for STEP and ALLREDUCE (they act on the whole stage, micro_batch = -1).
bool uses_micro_batch(ActionKind kind);

bool operator==(const Placement& a, const Placement& b);  // kind, num_ranks and map
inline bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

struct Schedule {
  std::string name;  // generator name, or "custom"
  // The range of the actions' micro_batch numbers. With seq_slices S > 1 that number is a *unit*
  // u = mb * S + j (slice j of micro-batch mb), and num_micro_batches counts units (m * S).
  int num_micro_batches = 0;
  // Sequence slices per micro-batch (SlimPipe / Seq1F1B): on every stage the forwards of a
  // micro-batch's slices run in slice order and its backwards (B or BW) in reverse slice order,
  // because slice j attends to the keys and values of slices < j. 1 = no slicing.
  int seq_slices = 1;
  // Copies of the model trained side by side over the same ranks (BitPipe's down and up
  // pipelines: 2), 1 or 2. With R copies, stages [k S/R, (k+1) S/R) are copy k's pipeline: one chain
  // of the model's S/R stages, stage k S/R + j running the model's stage j, and micro-batches
  // [k M/R, (k+1) M/R) go through copy k only. Activations and gradients pass only between
  // neighbouring stages of one pipeline. With R = 2 every stage needs an ALLREDUCE after its last
  // weight gradient, which sends those gradients to its sibling (sibling_stage: the same model stage
  // in the other copy), and its STEP waits for the sibling's and adds them: both copies then hold
  // the same sum, the one SequentialTrainer computes for R data-parallel replicas, and step alike.
  int pipelines = 1;
  Placement placement;
  std::vector<std::vector<Action>> ranks;  // ranks[r] = rank r's actions in execution order
  // The family's traits, set by generate_schedule from the registry (schedule_traits.h). A schedule
  // read from text is synchronous (the defaults): the windowed families run from their generators.
  // Not part of operator== (the text form does not carry them).
  ScheduleTraits traits;

  int num_ranks() const { return placement.num_ranks; }
  int num_stages() const { return placement.num_stages(); }
  int slice_of(int unit) const { return unit % seq_slices; }
  // The chain of stages of one pipeline (every stage when pipelines is 1).
  int stages_per_pipeline() const { return pipelines > 1 ? num_stages() / pipelines : num_stages(); }
  int pipeline_of_stage(int stage) const { return stages_per_pipeline() > 0 ? stage / stages_per_pipeline() : 0; }
  // The model's stage that `stage` runs (its index within its pipeline).
  int model_stage(int stage) const { return stages_per_pipeline() > 0 ? stage % stages_per_pipeline() : stage; }
  int micro_batches_per_pipeline() const { return pipelines > 1 ? num_micro_batches / pipelines : num_micro_batches; }
  int pipeline_of_micro_batch(int mb) const {
    return micro_batches_per_pipeline() > 0 ? mb / micro_batches_per_pipeline() : 0;
  }
  // The first micro-batch through `stage` (its pipeline's first) and the last stage of pipeline k.
  int first_micro_batch(int stage) const { return pipeline_of_stage(stage) * micro_batches_per_pipeline(); }
  int last_stage_of_pipeline(int k) const { return (k + 1) * stages_per_pipeline() - 1; }
  bool first_in_pipeline(int stage) const { return model_stage(stage) == 0; }
  bool last_in_pipeline(int stage) const { return model_stage(stage) == stages_per_pipeline() - 1; }
  // pipelines == 2: the stage of the other copy that runs the same model stage.
  int sibling_stage(int stage) const {
    return pipeline_of_stage(stage) == 0 ? stage + stages_per_pipeline() : stage - stages_per_pipeline();
  }
};
// The largest number of model copies a schedule may train side by side (Schedule::pipelines).
constexpr int kMaxPipelines = 2;

bool operator==(const Schedule& a, const Schedule& b);  // every field
inline bool operator!=(const Schedule& a, const Schedule& b) { return !(a == b); }

// Refuses (kInvalidArgument, message starting with `where`) a schedule size past the limits of
// runtime/core/limits.h: ranks, stages (ranks x chunks), micro-batches, and stages x micro-batches.
// Generators, the text parser and the C API check sizes with it before allocating anything.
void check_schedule_size(int64_t ranks, int64_t stages, int64_t micro_batches, const std::string& where);

// For test output (googletest prints values through operator<<).
std::ostream& operator<<(std::ostream& out, const Action& action);

}  // namespace pf::sched
