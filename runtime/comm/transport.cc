#include "runtime/comm/transport.h"

#include <chrono>
#include <thread>

#include "runtime/core/error.h"

namespace pf::comm {

namespace {
std::string action_name(const char* kind, const MessageKey& key, int stage) {
  return std::to_string(stage) + kind + std::to_string(key.micro_batch);
}
}  // namespace

std::string recv_action_name(const MessageKey& key) {
  switch (key.kind) {
    case MessageKind::kActivation: return action_name("RECV_F", key, key.stage);
    case MessageKind::kGradient: return action_name("RECV_B", key, key.stage);
    case MessageKind::kContextOut: return action_name("HOLD", key, key.stage);
    case MessageKind::kContextBack: return action_name("RELOAD", key, key.stage);
    case MessageKind::kStageGradients: return std::to_string(key.stage) + "STEP";
    case MessageKind::kGroupOutput: return action_name("GATHER_F", key, key.stage);
    case MessageKind::kGroupLogits: return action_name("GATHER_LOGITS", key, key.stage);
  }
  return "?";
}

std::string send_action_name(const MessageKey& key) {
  switch (key.kind) {
    case MessageKind::kActivation: return action_name("SEND_F", key, key.stage - 1);
    case MessageKind::kGradient: return action_name("SEND_B", key, key.stage + 1);
    case MessageKind::kContextOut: return action_name("OFFLOAD", key, key.stage);
    case MessageKind::kContextBack: return action_name("RETURN", key, key.stage);
    case MessageKind::kStageGradients: return "the ALLREDUCE of stage " + std::to_string(key.stage) + "'s sibling";
    case MessageKind::kGroupOutput: return action_name("SHARE_F", key, key.stage);
    case MessageKind::kGroupLogits: return action_name("SHARE_LOGITS", key, key.stage);
  }
  return "?";
}

}  // namespace pf::comm
