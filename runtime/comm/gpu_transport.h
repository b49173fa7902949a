// The transport between pipeline ranks that run on CUDA devices (docs/EXECUTION.md, "Running on
// GPUs"). Rank r runs on CUDA device devices[r]; several ranks may share a device.
//
// Per pair of ranks:
// * same device: the in-process transport (InProcessTransport), with stream ordering added in the
//   hand-over path. The sender copies the tensor (device to device, on its current stream) into a
//   new storage, records an event on its current stream after that copy and hands the copy over;
//   the receiver makes its current stream wait for that event before it returns the tensor. The
//   copy is what keeps the caching allocator's cross-stream reuse rule (caching_allocator.h): every
//   storage is then only ever used on one rank's stream, so whichever thread drops the last
//   reference does so on a stream that is ordered after every use (the sender may still hold the
//   original through its saved contexts; the receiver owns the copy alone). Values are bit-identical.
// * distinct devices: NCCL. One 2-rank pf::NcclTransport per pair that exchanges messages
//   (built at construction from the schedule's SEND/RECV pairs), used by the two ranks' threads
//   only. NCCL does its own stream ordering (its send stream waits for the sender's current stream;
//   a receive is complete on the host before recv() returns).
//
// cancel() / cancelled() / reset() / pending_messages() act on every part at once, with the
// semantics of InProcessTransport.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/comm/gpu_transport_group.h"
#include "runtime/comm/in_process_transport.h"
#include "runtime/comm/transport.h"

namespace pf::cuda {

class CudaEvent;
}  // namespace pf::cuda

namespace pf::comm {

class NcclTransport;

class GpuTransport final : public GpuTransportGroup {
 public:
  struct Options {
    InProcessTransport::Options local;  // ranks on one device
    int max_pending_sends = 64;         // NCCL: per (source, destination) pair
  };
  // devices[r]: CUDA ordinal of rank r (visible devices; repeats allowed). nccl_pairs: rank pairs
  // (a, b) on distinct devices that exchange messages; each gets a 2-rank NcclTransport (order and
  // duplicates do not matter). Sending between ranks on distinct devices without a pair is a
  // kInvalidArgument. Throws kNcclError / kCudaError when NCCL cannot be set up.
  GpuTransport(std::vector<int> devices, const std::vector<std::pair<int, int>>& nccl_pairs, Options options);
  ~GpuTransport() override;
  GpuTransport(const GpuTransport&) = delete;
  GpuTransport& operator=(const GpuTransport&) = delete;

  int num_ranks() const { return static_cast<int>(devices_.size()); }
  int device_of(int rank) const { return devices_.at(static_cast<size_t>(rank)); }
  // Rank `rank`'s endpoint, for that rank's worker thread, which must have a DeviceScope for
  // device_of(rank) and (normally) a CurrentStreamScope of its compute stream.
  Transport& endpoint(int rank) override;
  // True when messages between a and b go through NCCL (distinct devices), false in process.
  bool uses_nccl(int a, int b) const override { return devices_.at(a) != devices_.at(b); }
  int nccl_pair_count() const override { return static_cast<int>(nccl_.size()); }

  void cancel(const std::string& reason) override;
  bool cancelled() const override;
  void reset() override;
  size_t pending_messages() const override;

 private:
  using Endpoint = RankEndpoint<GpuTransport>;
  friend Endpoint;
  using EventKey = std::tuple<int, int, int, int, int>;  // src, dst, kind, micro-batch, stage
  void send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds);
  Tensor recv(int self, int from, const MessageKey& key, double timeout_seconds);
  NcclTransport& pair(int a, int b, const MessageKey& key, bool sending);

  std::vector<int> devices_;
  InProcessTransport local_;
  std::map<std::pair<int, int>, std::unique_ptr<NcclTransport>> nccl_;  // (min rank, max rank)
  std::mutex events_mutex_;
  std::map<EventKey, std::shared_ptr<cuda::CudaEvent>> events_;  // same-device messages in flight
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

}  // namespace pf::comm
