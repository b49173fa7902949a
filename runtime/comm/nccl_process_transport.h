// pf::comm::Transport over NCCL for one GPU per process (docs/CUDA.md, "GPU ranks in separate
// processes"): this process runs rank world->rank() of a pipeline on CUDA device `device`; the other
// ranks are other processes of `world` (an MpiWorld under mpirun; any World works), maybe on other
// hosts. Messages move device to device: a sent tensor must be a CUDA tensor on `device`, a
// received one is allocated there (charged to the receiving thread's memory category). Matching is
// NcclTransport's: by (kind, micro-batch, stage) within a (source, destination) pair.
//
// Construction is collective over `world`, and every member passes the same `talking` pairs:
// * Every member's host and device are gathered (gpu_process_setup.h); two ranks that exchange
//   messages on one device of one host are refused with kInvalidArgument on every member (NCCL
//   cannot put one device twice into a communicator).
// * Channels: one per direction of every pair of ranks that talk (nccl_channels), a 2-rank
//   communicator whose rank 0 sends and rank 1 receives, with its own stream on each side (so a
//   send that nobody received yet never stands in front of a receive, as in NcclTransport).
//   World rank 0 makes every channel's ncclUniqueId and broadcasts them over `world` (for an
//   MpiWorld, MPI_Ibcast); each process creates its channels' communicators with
//   ncclCommInitRankConfig, non-blocking (config.blocking = 0), polls them until they are ready
//   within init_timeout_seconds, and warms each one up with a header exchange, so that NCCL's
//   connection setup never runs inside a step.
// * A member that fails to set up aborts the world with the reason (World::abort), so the others
//   stop within a poll interval with kCancelled naming it instead of waiting out the timeout.
// Messages to itself (two stages of one rank, the V schedules) are handed over in process: one
// thread and one stream both send and receive them.
//
// send() / recv() follow NcclTransport: the nccl_wire.h header then the payload, in one NCCL group
// on the channel's stream; the send stream first waits for the sender's current stream; send()
// does not wait for the receiver (at most max_pending_sends messages per channel in flight, more
// wait with the timeout); recv() waits for the header on the host, checks it, allocates, receives
// the payload and waits for it; a message for another key is kept for a later recv(). Because the
// communicators are non-blocking, an NCCL call may answer ncclInProgress; the transport then polls
// the communicator until it is ready before it issues anything else on it.
//
// Waits never hang: every host wait polls its event, the deadline, cancel() and world->aborted()
// (another process failed). A timeout aborts that channel's communicator (ncclCommAbort) and throws
// kTimeout naming the rank, the receiving action, the micro-batch and the peer; cancel() or an
// aborted world throws kCancelled with the reason, as the World contract says. reset() between
// steps never rebuilds a channel: as with MpiTransport, a failed step leaves the world aborted and
// the later steps fail (ProcessRankGroup).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/gpu_process_setup.h"
#include "runtime/comm/gpu_transport_group.h"
#include "runtime/comm/in_process_transport.h"
#include "runtime/comm/transport.h"
#include "runtime/comm/world.h"

namespace pf::comm {

class NcclProcessTransport final : public GpuTransportGroup {
 public:
  struct Options {
    int max_pending_sends = 64;           // per channel, like the mailbox capacity
    double init_timeout_seconds = 300.0;  // every collective and wait of the construction
  };
  // `device`: this process's CUDA ordinal (visible). `talking`: the rank pairs of the pipeline that
  // exchange messages (either order, repeats allowed; (r, r): a rank that sends to itself).
  NcclProcessTransport(std::shared_ptr<World> world, int device, const std::vector<std::pair<int, int>>& talking,
                       Options options);
  // Finalizes the communicators (bounded wait), aborting those that do not finish or that still
  // hold unfinished work. No endpoint may be in use.
  ~NcclProcessTransport() override;
  NcclProcessTransport(const NcclProcessTransport&) = delete;
  NcclProcessTransport& operator=(const NcclProcessTransport&) = delete;

  int rank() const { return rank_; }
  int device() const { return device_; }
  // Where every rank of the world runs (gathered at construction).
  const std::vector<ProcessPlacement>& placements() const { return placements_; }

  // This process's rank's endpoint (kInvalidArgument for another rank), for its worker thread,
  // which should have a device scope for device() and its compute stream as the current stream.
  Transport& endpoint(int rank) override;
  bool uses_nccl(int a, int b) const override { return a != b; }
  // The ranks this process exchanges messages with over NCCL.
  int nccl_pair_count() const override { return static_cast<int>(channels_.size() / 2); }
  // Wakes every waiting send/recv with kCancelled (each aborts the channel it waited on).
  void cancel(const std::string& reason) override;
  bool cancelled() const override;
  // Between steps, with no endpoint in use: releases finished sends and drops stashed and
  // self-sent messages; clears cancel() only while no channel was aborted.
  void reset() override;
  // This process's view: its sends not yet completed, messages received for a later recv(), and
  // messages to itself not yet received.
  size_t pending_messages() const override;

 private:
  struct Channel;
  class Endpoint;
  friend class Endpoint;
  struct Enqueue;  // an NCCL call on a channel's communicator (in the .cc: no NCCL type here)
  enum class Wait { kDone, kTimedOut, kCancelled };
  using TimePoint = std::chrono::steady_clock::time_point;

  Channel* channel(int from, int to) const;
  // Polls ready(), the deadline, cancel() and the world (an abort there cancels this transport).
  Wait poll(const std::function<bool()>& ready, TimePoint deadline);
  // With the channel's NCCL lock held: polls its communicator out of ncclInProgress, or aborts
  // the channel and throws (its error, kTimeout, kCancelled naming `action`).
  void wait_ready(Channel& ch, const std::string& what, TimePoint deadline, const std::string& action);
  // Runs `enqueue` in an NCCL group on the channel and waits out ncclInProgress.
  void issue(Channel& ch, const std::string& what, const Enqueue& enqueue, TimePoint deadline,
             const std::string& action);
  void abort_locked(Channel& ch, const std::string& why);  // the channel's NCCL lock held
  void send(int to, const MessageKey& key, Tensor tensor, double timeout_seconds);
  Tensor recv(int from, const MessageKey& key, double timeout_seconds);
  void open_channels(const std::vector<std::pair<int, int>>& channels);
  void close_channels();
  void abort_channel(Channel& ch, const std::string& why);
  void release_finished_sends(Channel& ch);
  [[noreturn]] void throw_cancelled(const std::string& action, int peer);
  std::string cancel_reason() const;

  std::shared_ptr<World> world_;
  int rank_ = 0;
  int device_ = 0;
  Options options_;
  std::vector<ProcessPlacement> placements_;
  std::vector<std::unique_ptr<Channel>> channels_;  // this process's, sorted by (from, to)
  InProcessTransport self_;                         // messages to itself (its endpoint(rank_) only)
  std::unique_ptr<Endpoint> endpoint_;
  mutable std::mutex cancel_mutex_;
  std::string cancel_reason_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace pf::comm
