// What each action kind means, in one table that the IR (names, classes), the validator (message
// partners and peers), the simulator (cost and activation effect) and the executor (its handlers
// are listed in the same order) all read. docs/SCHEDULES.md describes the kinds.
#pragma once

#include "runtime/schedules/ir.h"

namespace pf::sched {

enum class ActionClass { kCompute, kCommunication, kMemory, kStage };

// Which CostModel term times an action of the kind (simulator.h).
enum class CostTerm {
  kNone,            // SEND/RECV (latency is t_comm on the dependency), HOLD/RETURN (timed on the owner)
  kForward,         // t_f[s] (F, RECOMPUTE)
  kBackwardInput,   // t_b[s]
  kBackwardWeight,  // t_w[s]
  kBackwardFused,   // t_b[s] + t_w[s]
  kTransfer,        // m_b[s] / transfer_bandwidth (OFFLOAD, RELOAD)
  kStep,            // t_step (STEP, UPDATE)
  kAllReduce,       // t_allreduce_stage[s] or t_allreduce
  kHead,            // t_head[s] (0 when t_head is empty)
};

// The change an action makes to its rank's device-resident activation memory: `live` contexts
// and bytes = b * m_b[s] + w * m_w[s] + in * m_in[s] (docs/MEMORY.md).
struct ActivationEffect {
  int live = 0;
  int b = 0, w = 0, in = 0;
};

struct ActionKindInfo {
  ActionKind kind;
  const char* name;           // the text form: "F", "SEND_F", ...
  ActionClass action_class;
  bool per_micro_batch;       // false: STEP and ALLREDUCE act on the whole stage (micro_batch -1)
  // Communication: the stage the message goes to or comes from (relative), and the matching
  // action on that stage's rank (SEND_F <-> RECV_F, SEND_B <-> RECV_B). 0 / the kind itself
  // otherwise.
  int peer_stage_offset;
  ActionKind partner;
  const char* peer_role;      // communication: what the peer stage is, e.g. "next stage to send activations to"
  CostTerm cost;
  ActivationEffect effect;               // on its rank
  ActivationEffect effect_recomputed;    // F of a context that has a RECOMPUTE: keeps only m_in
};

// One entry per kind, indexed by the kind's value.
const ActionKindInfo& action_kind_info(ActionKind kind);

}  // namespace pf::sched
