// Ranks as threads of one process: every endpoint's mailboxes live in this object and a sent
// Tensor is handed over without copying (Tensor shares storage).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/transport.h"

namespace pf::comm {

// All endpoints of one process. cancel() wakes every waiter of every endpoint with kCancelled (so
// one failing rank stops them all); reset() drops undelivered messages and clears the cancel state
// before the next step.
class InProcessTransport {
 public:
  struct Options {
    int mailbox_capacity = 64;     // messages queued per (source, destination) pair
    double spin_seconds = 20e-6;   // a receiver polls this long before it sleeps on the condition
  };
  explicit InProcessTransport(int num_ranks) : InProcessTransport(num_ranks, Options()) {}
  InProcessTransport(int num_ranks, Options options);
  ~InProcessTransport();

  int num_ranks() const { return num_ranks_; }
  Transport& endpoint(int rank);

  void cancel(const std::string& reason);
  bool cancelled() const;
  void reset();
  // Messages sent but not received (for tests).
  size_t pending_messages() const;

 private:
  using Endpoint = RankEndpoint<InProcessTransport>;
  friend Endpoint;
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::pair<MessageKey, Tensor>> queue;
  };
  Mailbox& box(int src, int dst) { return *boxes_[static_cast<size_t>(src) * num_ranks_ + dst]; }
  void send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds);
  Tensor recv(int self, int from, const MessageKey& key, double timeout_seconds);
  [[noreturn]] void throw_cancelled(int self, const std::string& action, int peer);

  int num_ranks_;
  Options options_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  mutable std::mutex cancel_mutex_;
  std::string cancel_reason_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace pf::comm
