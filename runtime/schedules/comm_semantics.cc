#include "runtime/schedules/comm_semantics.h"

#include "runtime/core/error.h"
#include "runtime/schedules/action_kinds.h"

namespace pf::sched {

const char* comm_semantics_name(CommSemantics comm) {
  switch (comm) {
    case CommSemantics::kRendezvous:
      return "rendezvous";
    case CommSemantics::kPosted:
      return "posted";
  }
  return "?";
}

CommSemantics parse_comm_semantics(const std::string& text) {
  if (text == "rendezvous") return CommSemantics::kRendezvous;
  if (text == "posted") return CommSemantics::kPosted;
  fail(ErrorCode::kInvalidArgument, "unknown communication semantics '", text, "' (known: rendezvous, posted)");
}

Action message_partner(const Action& communication) {
  const ActionKindInfo& info = action_kind_info(communication.kind);
  return Action{info.partner, communication.stage + info.peer_stage_offset, communication.micro_batch};
}

std::optional<Action> delivering_recv(const Action& consumer) {
  switch (consumer.kind) {
    case ActionKind::kForward:
      return Action{ActionKind::kRecvF, consumer.stage, consumer.micro_batch};
    case ActionKind::kBackwardInput:
    case ActionKind::kBackward:
      return Action{ActionKind::kRecvB, consumer.stage, consumer.micro_batch};
    default:
      return std::nullopt;
  }
}

}  // namespace pf::sched
