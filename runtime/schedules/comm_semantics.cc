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

const std::vector<std::string>& comm_semantics_names() {
  static const std::vector<std::string> names = {comm_semantics_name(CommSemantics::kRendezvous),
                                                 comm_semantics_name(CommSemantics::kPosted)};
  return names;
}

CommSemantics parse_comm_semantics(const std::string& text) {
  for (CommSemantics c : {CommSemantics::kRendezvous, CommSemantics::kPosted})
    if (text == comm_semantics_name(c)) return c;
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
