// A World whose members are threads of one process: `ThreadWorld group(n)`, then thread r uses
// `group.member(r)`. Endpoints are one InProcessTransport(n) owned by the group (zero-copy
// hand-over). Collectives rendezvous the n threads; the member that arrives last combines the
// contributions in rank order (sums: rank 0 + rank 1 + ..., the same bits on every member and on
// every run) and wakes the others.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/collective_signature.h"
#include "runtime/comm/in_process_transport.h"
#include "runtime/comm/world.h"

namespace pf::comm {

class ThreadWorld {
 public:
  explicit ThreadWorld(int size) : ThreadWorld(size, InProcessTransport::Options()) {}
  ThreadWorld(int size, InProcessTransport::Options options);
  ~ThreadWorld();
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int size() const { return size_; }
  World& member(int rank);
  InProcessTransport& transport() { return transport_; }
  // Some member called abort().
  bool aborted() const;
  std::string abort_cause() const;  // "rank 1 failed: <reason>", or ""
  // Makes an aborted group usable again (between steps): clears the cancel state and the
  // transport's undelivered messages. kFailedPrecondition while a member is inside a collective.
  void reset();

 private:
  class Member;
  friend class Member;
  struct Slot {
    bool arrived = false;
    bool came = false;  // arrived in this round, even if it gave up since (timeout messages)
    CollectiveSignature signature;
    const void* data = nullptr;
  };

  // Deposits this member's contribution, waits for the others and returns the combined result
  // (empty for a barrier).
  std::vector<char> rendezvous(int rank, CollectiveOp op, const void* data, size_t size, int root,
                               double timeout_seconds);
  void combine_locked();  // by the last member to arrive, under mutex_
  void abort(int rank, const std::string& reason);
  [[noreturn]] void throw_cancelled_locked(int rank, CollectiveOp op);

  int size_;
  InProcessTransport transport_;
  std::vector<std::unique_ptr<Member>> members_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  int arrived_ = 0;
  int inside_ = 0;               // members inside rendezvous()
  uint64_t generation_ = 0;      // completed collectives
  std::vector<char> result_;     // of generation_ - 1, read by its members before they arrive again
  std::string result_error_;     // signatures of generation_ - 1 disagreed
  bool aborted_ = false;
  std::string abort_reason_;     // "rank 1 failed: <reason>"
};

}  // namespace pf::comm
