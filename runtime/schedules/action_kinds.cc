#include "runtime/schedules/action_kinds.h"

#include "runtime/core/error.h"

namespace pf::sched {
namespace {

using K = ActionKind;
using C = ActionClass;
using T = CostTerm;

constexpr ActivationEffect kNoEffect{};

// clang-format off
constexpr ActionKindInfo kKinds[kNumActionKinds] = {
  // kind                name         class              per mb peer partner  role  cost                  effect {live, b, w, in}  recomputed F
  {K::kForward,        "F",         C::kCompute,       true,  0, K::kForward,        nullptr, T::kForward,        {1, 1, 0, 0},   {1, 0, 0, 1}},
  {K::kBackwardInput,  "B",         C::kCompute,       true,  0, K::kBackwardInput,  nullptr, T::kBackwardInput,  {-1, -1, 1, 0}, {-1, -1, 1, 0}},
  {K::kBackwardWeight, "W",         C::kCompute,       true,  0, K::kBackwardWeight, nullptr, T::kBackwardWeight, {0, 0, -1, 0},  {0, 0, -1, 0}},
  {K::kBackward,       "BW",        C::kCompute,       true,  0, K::kBackward,       nullptr, T::kBackwardFused,  {-1, -1, 0, 0}, {-1, -1, 0, 0}},
  {K::kSendF,          "SEND_F",    C::kCommunication, true,  1, K::kRecvF,          "next stage to send activations to", T::kNone,           kNoEffect,      kNoEffect},
  {K::kRecvF,          "RECV_F",    C::kCommunication, true, -1, K::kSendF,          "previous stage to receive activations from", T::kNone,           kNoEffect,      kNoEffect},
  {K::kSendB,          "SEND_B",    C::kCommunication, true, -1, K::kRecvB,          "previous stage to send gradients to", T::kNone,           kNoEffect,      kNoEffect},
  {K::kRecvB,          "RECV_B",    C::kCommunication, true,  1, K::kSendB,          "next stage to receive gradients from", T::kNone,           kNoEffect,      kNoEffect},
  {K::kOffload,        "OFFLOAD",   C::kMemory,        true,  0, K::kOffload,        nullptr, T::kTransfer,       {-1, -1, 0, 0}, {-1, -1, 0, 0}},
  {K::kReload,         "RELOAD",    C::kMemory,        true,  0, K::kReload,         nullptr, T::kTransfer,       {1, 1, 0, 0},   {1, 1, 0, 0}},
  {K::kRecompute,      "RECOMPUTE", C::kCompute,       true,  0, K::kRecompute,      nullptr, T::kForward,        {0, 1, 0, -1},  {0, 1, 0, -1}},
  {K::kStep,           "STEP",      C::kStage,         false, 0, K::kStep,           nullptr, T::kStep,           kNoEffect,      kNoEffect},
  {K::kAllReduce,      "ALLREDUCE", C::kStage,         false, 0, K::kAllReduce,      nullptr, T::kAllReduce,      kNoEffect,      kNoEffect},
  {K::kHold,           "HOLD",      C::kMemory,        true,  0, K::kHold,           nullptr, T::kNone,           {1, 1, 0, 0},   {1, 1, 0, 0}},
  {K::kReturn,         "RETURN",    C::kMemory,        true,  0, K::kReturn,         nullptr, T::kNone,           {-1, -1, 0, 0}, {-1, -1, 0, 0}},
  {K::kUpdate,         "UPDATE",    C::kStage,         true,  0, K::kUpdate,         nullptr, T::kStep,           kNoEffect,      kNoEffect},
  {K::kHead,           "HEAD",      C::kCompute,       true,  0, K::kHead,           nullptr, T::kHead,           kNoEffect,      kNoEffect},
};
// clang-format on

constexpr bool in_kind_order() {
  for (int k = 0; k < kNumActionKinds; ++k)
    if (static_cast<int>(kKinds[k].kind) != k) return false;
  return true;
}
static_assert(in_kind_order(), "kKinds lists the kinds in the order of their values");

}  // namespace

const ActionKindInfo& action_kind_info(ActionKind kind) {
  const int k = static_cast<int>(kind);
  PF_INTERNAL_CHECK(k >= 0 && k < kNumActionKinds, "action_kind_info: no action kind ", k);
  return kKinds[k];
}

}  // namespace pf::sched
