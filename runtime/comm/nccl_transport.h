// pf::comm::Transport over NCCL for N GPUs driven by one process (one worker thread per GPU).
//
// Rank r runs on CUDA device devices[r]. Messages move device to device: a sent tensor must be a
// CUDA tensor on the sender's device, a received one is allocated on the receiver's device
// (charged to the receiving thread's current memory category). Same matching as the in-process
// transport: by (kind, micro-batch, stage) within a (source, destination) pair.
//
// Protocol (docs/CUDA.md):
// * One *channel* per ordered pair (a -> b), a != b: a 2-rank communicator created with
//   ncclCommInitAll({device a, device b}) (rank 0 sends, rank 1 receives), a send stream on a and a
//   receive stream on b, warmed up at construction (one 128-byte exchange, so that NCCL's lazy
//   connection setup never blocks a later call). Directional channels with their own streams mean
//   a pending send never stands in front of a receive in a stream or communicator, so any order of
//   sends and receives that works with the in-process transport works here. A loopback channel per
//   rank (a 1-rank communicator) carries sends to oneself.
// * send(): the channel's send stream waits for the sender thread's current stream (stream.h),
//   then one ncclGroupStart/ncclGroupEnd group sends a fixed 128-byte header (magic, sequence
//   number, kind, micro-batch, stage, dtype, source rank, rank and dims, payload bytes) and the
//   payload. send() does not wait for the receiver; up to max_pending_sends messages per pair may be
//   in flight (more: it waits, with the timeout). The transport keeps the tensor until NCCL is done.
// * recv(): posts a receive of the header on the channel's receive stream, waits for it on the
//   host (polling an event, with the timeout and cancel()), allocates the tensor the header
//   describes, receives the payload and waits for it. A message for another key is received and
//   kept (stash) for a later recv(), as the in-process mailbox would.
// * A wait that times out or is cancelled aborts that channel's communicators (ncclCommAbort on both
//   sides) and throws kTimeout / kCancelled; reset() rebuilds aborted channels, and also any channel
//   left with messages sent but never received.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/comm/transport.h"

namespace pf::comm {

class NcclTransport {
 public:
  struct Options {
    int max_pending_sends = 64;           // per (source, destination) pair, like the mailbox capacity
    double init_timeout_seconds = 300.0;  // communicator warm-up at construction and in reset()
  };
  // devices[r] is rank r's CUDA device; distinct, visible devices (kInvalidArgument otherwise).
  // Throws kNcclError / kCudaError / kTimeout when NCCL cannot be set up.
  explicit NcclTransport(std::vector<int> devices);
  NcclTransport(std::vector<int> devices, Options options);
  // Aborts channels with undelivered messages, destroys the others. No endpoint may be in use.
  ~NcclTransport();
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int num_ranks() const { return static_cast<int>(devices_.size()); }
  int device_of(int rank) const;
  // Rank `rank`'s endpoint. Each endpoint is meant for one thread at a time (its rank's worker);
  // that thread should have a DeviceScope and a CurrentStreamScope for the rank's device.
  Transport& endpoint(int rank);

  // Wakes every waiting send/recv with kCancelled (each aborts the channel it waited on); later
  // calls throw kCancelled until reset().
  void cancel(const std::string& reason);
  bool cancelled() const;
  // Between steps, with no endpoint in use: drops undelivered and stashed messages, aborts and
  // rebuilds every channel that was aborted or still holds unreceived messages, clears cancel().
  void reset();
  // Messages sent but not yet returned by a recv() (for tests).
  size_t pending_messages() const;
  // How many times a channel was rebuilt by reset() (for tests).
  int rebuilt_channels() const { return rebuilt_channels_.load(); }

 private:
  struct Channel;
  using Endpoint = RankEndpoint<NcclTransport>;
  friend Endpoint;

  Channel& channel(int src, int dst) { return *channels_[static_cast<size_t>(src) * devices_.size() + dst]; }
  void send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds);
  Tensor recv(int self, int from, const MessageKey& key, double timeout_seconds);
  void send_loopback(Channel& ch, int rank, const MessageKey& key, Tensor tensor, double timeout_seconds);
  Tensor recv_loopback(Channel& ch, int rank, const MessageKey& key, double timeout_seconds);
  void open_channel(Channel& ch);
  void abort_channel(Channel& ch, const std::string& why);
  [[noreturn]] void throw_cancelled(int self, const std::string& action, int peer);
  std::string cancel_reason() const;

  std::vector<int> devices_;
  Options options_;
  std::vector<std::unique_ptr<Channel>> channels_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  mutable std::mutex cancel_mutex_;
  std::string cancel_reason_;
  std::atomic<bool> cancelled_{false};
  std::atomic<int> rebuilt_channels_{0};
};

}  // namespace pf::comm
