#include "runtime/comm/in_process_transport.h"

#include <chrono>
#include <thread>

#include "runtime/core/error.h"

namespace pf::comm {

InProcessTransport::InProcessTransport(int num_ranks, Options options) : num_ranks_(num_ranks), options_(options) {
  PF_CHECK_ARG(num_ranks >= 1, "transport: num_ranks must be >= 1, got ", num_ranks);
  PF_CHECK_ARG(options.mailbox_capacity >= 1, "transport: mailbox_capacity must be >= 1, got ",
               options.mailbox_capacity);
  for (int i = 0; i < num_ranks * num_ranks; ++i) boxes_.push_back(std::make_unique<Mailbox>());
  for (int r = 0; r < num_ranks; ++r) endpoints_.push_back(std::make_unique<Endpoint>(this, r));
}

InProcessTransport::~InProcessTransport() = default;

Transport& InProcessTransport::endpoint(int rank) {
  PF_CHECK_ARG(rank >= 0 && rank < num_ranks_, "transport: no rank ", rank, " (", num_ranks_, " ranks)");
  return *endpoints_[rank];
}

void InProcessTransport::throw_cancelled(int self, const std::string& action, int peer) {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(cancel_mutex_);
    reason = cancel_reason_;
  }
  fail(ErrorCode::kCancelled, "rank ", self, ": ", action, " (peer rank ", peer, ") cancelled: ", reason);
}

void InProcessTransport::send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  PF_CHECK_ARG(to >= 0 && to < num_ranks_ && to != from, "rank ", from, ": ", send_action_name(key),
               " to invalid peer rank ", to);
  if (cancelled_.load(std::memory_order_acquire)) throw_cancelled(from, send_action_name(key), to);
  Mailbox& b = box(from, to);
  std::unique_lock<std::mutex> lock(b.mutex);
  if (static_cast<int>(b.queue.size()) >= options_.mailbox_capacity) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    while (static_cast<int>(b.queue.size()) >= options_.mailbox_capacity) {
      if (cancelled_.load(std::memory_order_acquire)) {
        lock.unlock();
        throw_cancelled(from, send_action_name(key), to);
      }
      if (b.changed.wait_until(lock, deadline) == std::cv_status::timeout &&
          static_cast<int>(b.queue.size()) >= options_.mailbox_capacity) {
        fail(ErrorCode::kTimeout, "rank ", from, ": ", send_action_name(key), " (micro-batch ", key.micro_batch,
             ") to rank ", to, " timed out after ", timeout_seconds, " s: the mailbox stayed full");
      }
    }
  }
  b.queue.emplace_back(key, std::move(tensor));
  lock.unlock();
  b.changed.notify_all();
}

Tensor InProcessTransport::recv(int self, int from, const MessageKey& key, double timeout_seconds) {
  PF_CHECK_ARG(from >= 0 && from < num_ranks_ && from != self, "rank ", self, ": ", recv_action_name(key),
               " from invalid peer rank ", from);
  Mailbox& b = box(from, self);
  auto take = [&](Tensor* out) {
    for (auto it = b.queue.begin(); it != b.queue.end(); ++it) {
      if (it->first == key) {
        *out = std::move(it->second);
        b.queue.erase(it);
        return true;
      }
    }
    return false;
  };
  Tensor out;
  const auto start = std::chrono::steady_clock::now();
  // Poll briefly first: a waker's notify costs tens of microseconds of scheduler latency.
  if (options_.spin_seconds > 0) {
    const auto spin_end = start + std::chrono::duration<double>(options_.spin_seconds);
    do {
      if (cancelled_.load(std::memory_order_acquire)) throw_cancelled(self, recv_action_name(key), from);
      {
        std::lock_guard<std::mutex> lock(b.mutex);
        if (take(&out)) {
          b.changed.notify_all();  // a sender may wait for room
          return out;
        }
      }
      std::this_thread::yield();
    } while (std::chrono::steady_clock::now() < spin_end);
  }
  const auto deadline = start + std::chrono::duration<double>(timeout_seconds);
  std::unique_lock<std::mutex> lock(b.mutex);
  while (true) {
    if (cancelled_.load(std::memory_order_acquire)) {
      lock.unlock();
      throw_cancelled(self, recv_action_name(key), from);
    }
    if (take(&out)) {
      lock.unlock();
      b.changed.notify_all();
      return out;
    }
    if (b.changed.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (take(&out)) {
        lock.unlock();
        b.changed.notify_all();
        return out;
      }
      fail(ErrorCode::kTimeout, "rank ", self, ": ", recv_action_name(key), " (micro-batch ", key.micro_batch,
           ") waited more than ", timeout_seconds, " s for rank ", from);
    }
  }
}

void InProcessTransport::cancel(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(cancel_mutex_);
    if (cancelled_.load()) return;
    cancel_reason_ = reason;
    cancelled_.store(true, std::memory_order_release);
  }
  for (auto& b : boxes_) {
    std::lock_guard<std::mutex> lock(b->mutex);  // no waiter can miss the flag between check and wait
    b->changed.notify_all();
  }
}

bool InProcessTransport::cancelled() const { return cancelled_.load(std::memory_order_acquire); }

void InProcessTransport::reset() {
  for (auto& b : boxes_) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->queue.clear();
  }
  std::lock_guard<std::mutex> lock(cancel_mutex_);
  cancel_reason_.clear();
  cancelled_.store(false, std::memory_order_release);
}

size_t InProcessTransport::pending_messages() const {
  size_t n = 0;
  for (auto& b : boxes_) {
    std::lock_guard<std::mutex> lock(b->mutex);
    n += b->queue.size();
  }
  return n;
}

}  // namespace pf::comm
