// Point-to-point tensors between processes over MPI: one endpoint per process. A message is a
// 96-byte header (key, dtype, shape, byte count, magic; mpi_wire.h) followed by the tensor's bytes,
// each on a tag derived from the key, so messages are matched by (source, key) in any order.
//
// send() is non-blocking: it posts MPI_Isend for the header and the payload and keeps the Tensor
// alive until MPI is done with it. At most max_pending_sends unfinished sends per destination; a
// further send polls the oldest until its timeout. drain() waits for every unfinished send (call it
// at the end of a step). recv() posts MPI_Irecv for the header, checks it (limits.h) before
// allocating, then receives the payload; it polls with a deadline (poll.h) and the world's abort
// channel, so it throws kTimeout or kCancelled instead of hanging. The timeout and cancel messages
// have InProcessTransport's form. Thread-safe: a worker thread and a copy thread may send and
// receive at once (MPI_THREAD_MULTIPLE).
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_abort_channel.h"
#include "runtime/comm/mpi_wire.h"
#include "runtime/comm/poll.h"
#include "runtime/comm/transport.h"

namespace pf::comm {

class MpiTransport : public Transport {
 public:
  struct Options {
    // Keys must have stage < max_stages and micro_batch < max_micro_batches: together they fix the
    // tag range, which must fit MPI_TAG_UB (checked at construction).
    int max_stages = 1024;
    int max_micro_batches = 65536;
    int max_pending_sends = 64;     // unfinished sends per destination
    int64_t max_message_bytes = 0;  // largest tensor accepted from a peer; 0: limits::max_message_bytes()
  };

  // `comm` is borrowed and used by this transport alone (MpiWorld gives it a duplicate); `abort` is
  // the world's failure channel.
  MpiTransport(MPI_Comm comm, std::shared_ptr<MpiAbortChannel> abort, Options options);
  // Sends still unfinished are left to complete in the background (their tensors are not freed
  // while MPI may read them).
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int num_ranks() const override { return size_; }
  void send(int to_rank, const MessageKey& key, Tensor tensor, double timeout_seconds) override;
  Tensor recv(int from_rank, const MessageKey& key, double timeout_seconds) override;

  // Sends posted but not yet complete (completes what it can first).
  size_t pending_sends() const;
  // Waits until every send is complete: kTimeout naming the destinations and actions still
  // unfinished, kCancelled when the world is aborted.
  void drain(double timeout_seconds);

  const TagLayout& tags() const { return tags_; }
  const Options& options() const { return options_; }

 private:
  struct PendingSend {
    MessageKey key;
    Tensor tensor;
    std::unique_ptr<WireHeader> header;
    std::vector<MPI_Request> requests;
  };
  // Receives given up on (timeout, abort) whose cancellation has not finished: their buffers stay
  // alive until it does.
  struct Abandoned {
    std::vector<MPI_Request> requests;
    std::shared_ptr<void> keepalive;
  };
  enum class Wait { kDone, kTimedOut, kCancelled };

  // transfer: a payload is on its way, so the wait keeps MPI progressing (Backoff(true)).
  Wait poll(std::vector<MPI_Request>* requests, std::vector<MPI_Status>* statuses, const Deadline& deadline,
            int peer, bool transfer) const;
  // Cancels receives; true when they had completed (the data arrived) rather than being cancelled.
  bool withdraw(std::vector<MPI_Request>* requests, std::vector<MPI_Status>* statuses,
                std::shared_ptr<void> keepalive);
  void reap_locked(int to) const;
  void reap_abandoned_locked() const;
  size_t pending_locked() const;
  // While sends with a payload are unfinished, calls into MPI every ~50 us so that they move on
  // while the rank computes (Open MPI has no progress thread of its own: over TCP a large send
  // otherwise advances only when its sender next calls MPI).
  void progress_loop();

  MPI_Comm comm_;
  std::shared_ptr<MpiAbortChannel> abort_;
  Options options_;
  int rank_ = 0;
  int size_ = 0;
  TagLayout tags_;
  mutable std::mutex mutex_;
  mutable std::vector<std::deque<std::unique_ptr<PendingSend>>> pending_;  // per destination
  mutable std::vector<Abandoned> abandoned_;
  mutable std::atomic<size_t> sends_in_flight_{0};  // pending sends with a payload
  std::mutex progress_mutex_;
  std::condition_variable progress_cv_;
  bool stop_progress_ = false;
  std::thread progress_;
};

}  // namespace pf::comm
