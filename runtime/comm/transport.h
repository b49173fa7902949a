// Point-to-point tensor transport between pipeline ranks. The executor sends a stage's output
// activation (kind kActivation) or input gradient (kind kGradient) for one micro-batch; messages
// are matched by (kind, micro-batch, receiving stage) and by the (source, destination) pair.
//
// The in-process implementation hands the Tensor over without copying (Tensor shares storage).
// MPI and NCCL transports implement the same interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace pf::comm {

// kContextOut / kContextBack: the packed saved activations of (micro-batch, stage) going to the
// partner rank that holds them (OFFLOAD -> HOLD) and back to the owner (RETURN -> RELOAD), policy
// balance. Their `stage` is the stage that owns the activations.
// kStageGradients: the weight gradients of a stage going to its sibling stage in the other copy of
// the model (two pipelines; ALLREDUCE -> STEP); `stage` is the receiving stage, micro_batch 0.
// kGroupOutput / kGroupLogits: neuron groups (runtime/neuron_groups) hand a group's output and its
// head's logits to the other groups of the same stage; `stage` is that stage.
enum class MessageKind : int {
  kActivation = 0,
  kGradient = 1,
  kContextOut = 2,
  kContextBack = 3,
  kStageGradients = 4,
  kGroupOutput = 5,
  kGroupLogits = 6,
};

struct MessageKey {
  MessageKind kind = MessageKind::kActivation;
  int micro_batch = 0;
  int stage = 0;  // the stage that consumes the tensor (contexts: the stage that owns them)
  bool operator==(const MessageKey& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && stage == o.stage;
  }
};

// The schedule action that receives this message, e.g. "1RECV_F3" (stage 1, micro-batch 3).
std::string recv_action_name(const MessageKey& key);
std::string send_action_name(const MessageKey& key);  // the sending action, e.g. "0SEND_F3"

// One rank's endpoint.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;
  // Hands `tensor` to rank `to_rank`. May block while the destination's mailbox is full (up to
  // timeout_seconds: kTimeout); throws kCancelled after cancel().
  virtual void send(int to_rank, const MessageKey& key, Tensor tensor, double timeout_seconds) = 0;
  // Waits for the message `key` from `from_rank`. Throws pf::Error kTimeout after timeout_seconds
  // (the message names this rank, the receiving action, the micro-batch and the peer) and
  // kCancelled when the transport is cancelled while it waits (or before).
  virtual Tensor recv(int from_rank, const MessageKey& key, double timeout_seconds) = 0;
};

// Rank `rank`'s endpoint of a transport object that serves all ranks of a process through
// `num_ranks()`, `send(from, to, key, tensor, timeout)` and `recv(self, from, key, timeout)` (which
// may be private: the owner befriends RankEndpoint).
template <typename Owner>
class RankEndpoint : public Transport {
 public:
  RankEndpoint(Owner* owner, int rank) : owner_(owner), rank_(rank) {}
  int rank() const override { return rank_; }
  int num_ranks() const override { return owner_->num_ranks(); }
  void send(int to_rank, const MessageKey& key, Tensor tensor, double timeout_seconds) override {
    owner_->send(rank_, to_rank, key, std::move(tensor), timeout_seconds);
  }
  Tensor recv(int from_rank, const MessageKey& key, double timeout_seconds) override {
    return owner_->recv(rank_, from_rank, key, timeout_seconds);
  }

 private:
  Owner* owner_;
  int rank_;
};

}  // namespace pf::comm
