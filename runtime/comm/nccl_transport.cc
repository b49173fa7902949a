#include "runtime/comm/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <utility>

#include "runtime/comm/nccl_support.h"
#include "runtime/comm/nccl_wire.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/pinned_host.h"
#include "runtime/devices/cuda/stream.h"

namespace pf::comm {

using cuda::check_cuda;
using cuda::check_device_ordinal;
using cuda::check_nccl;
using cuda::cuda_error_message;
using cuda::current_device;
using cuda::nccl_error_message;
using cuda::CudaEvent;
using cuda::CudaStream;
using cuda::CurrentStreamScope;
using cuda::current_stream_for;
using cuda::DeviceScope;
using cuda::PinnedHostBuffer;
using cuda::WaitResult;

using nccl_support::deadline_after;
using nccl_support::DeviceBuffer;
using nccl_support::drop_on_stream;
using nccl_support::finish_receive;
using nccl_support::nccl_group;
using nccl_support::seconds_left;
using nccl_wire::check_header;
using nccl_wire::Header;
using nccl_wire::header_dtype;
using nccl_wire::header_key;
using nccl_wire::header_shape;
using nccl_wire::kFieldSeq;
using nccl_wire::kHeaderBytes;
using nccl_wire::kMaxDims;
using nccl_wire::make_header;

// ---- channels -----------------------------------------------------------------------------------

struct NcclTransport::Channel {
  int src = 0;  // sending rank
  int dst = 0;  // receiving rank
  int src_device = 0;
  int dst_device = 0;
  bool loopback = false;
  int slots = 0;  // header slots: max_pending_sends + 1

  // NCCL state. nccl_mutex is held while anything is enqueued on the communicators and while they
  // are aborted, so an abort from the receiving thread never races a send from the sending one.
  std::mutex nccl_mutex;
  ncclComm_t send_comm = nullptr;  // rank 0 of the pair (loopback: the 1-rank communicator)
  ncclComm_t recv_comm = nullptr;  // rank 1 of the pair (loopback: the same communicator)
  bool aborted = false;
  std::string abort_reason;

  std::unique_ptr<CudaStream> send_stream;  // on src_device
  std::unique_ptr<CudaStream> recv_stream;  // on dst_device; loopback: none (send_stream does both)
  std::unique_ptr<DeviceBuffer> send_headers;         // `slots` headers on src_device
  std::unique_ptr<PinnedHostBuffer> send_headers_host;  // `slots` headers
  std::unique_ptr<DeviceBuffer> recv_headers;         // on dst_device: 1 slot, loopback `slots`
  std::unique_ptr<PinnedHostBuffer> recv_header_host;   // 1 header

  // Sender side (the sending rank's thread).
  struct InFlight {
    Tensor payload;
    std::unique_ptr<CudaEvent> done;
    int slot = 0;
  };
  std::mutex send_mutex;
  std::deque<InFlight> in_flight;
  std::vector<int> free_send_slots;
  std::atomic<int64_t> sent{0};

  // Receiver side (the receiving rank's thread). Cross-rank: messages received for another key.
  // Loopback: the mailbox of sent messages (the NCCL group already carried them).
  struct Received {
    MessageKey key;
    Tensor tensor;
    Tensor source;  // loopback: the sent tensor, kept until `done`
    std::unique_ptr<CudaEvent> done;
    int slot = 0;   // loopback: header slot
    Header expected{};  // loopback: the header that was sent
  };
  std::mutex recv_mutex;
  std::condition_variable stash_changed;
  std::deque<Received> stash;
  std::atomic<int64_t> stashed{0};
  std::atomic<int64_t> received{0};

  const CudaStream& receive_stream() const { return loopback ? *send_stream : *recv_stream; }
  std::string describe() const {
    return "rank " + std::to_string(src) + " -> rank " + std::to_string(dst) + " (cuda:" + std::to_string(src_device) +
           " -> cuda:" + std::to_string(dst_device) + ")";
  }
};

NcclTransport::NcclTransport(std::vector<int> devices) : NcclTransport(std::move(devices), Options()) {}

NcclTransport::NcclTransport(std::vector<int> devices, Options options)
    : devices_(std::move(devices)), options_(options) {
  const int n = num_ranks();
  PF_CHECK_ARG(n >= 1, "NCCL transport: at least one device is needed");
  PF_CHECK_ARG(options_.max_pending_sends >= 1, "NCCL transport: max_pending_sends must be >= 1, got ",
               options_.max_pending_sends);
  for (int r = 0; r < n; ++r) {
    check_device_ordinal(devices_[r], "NCCL transport");
    for (int q = 0; q < r; ++q) {
      PF_CHECK_ARG(devices_[q] != devices_[r], "NCCL transport: ranks ", q, " and ", r, " both on cuda:", devices_[r],
                   " (NCCL needs one device per rank)");
    }
  }
  for (int src = 0; src < n; ++src) {
    for (int dst = 0; dst < n; ++dst) {
      auto ch = std::make_unique<Channel>();
      ch->src = src;
      ch->dst = dst;
      ch->src_device = devices_[src];
      ch->dst_device = devices_[dst];
      ch->loopback = src == dst;
      ch->slots = options_.max_pending_sends + 1;
      channels_.push_back(std::move(ch));
    }
  }
  for (int r = 0; r < n; ++r) endpoints_.push_back(std::make_unique<Endpoint>(this, r));
  try {
    for (auto& ch : channels_) open_channel(*ch);
  } catch (...) {
    for (auto& ch : channels_) {
      if (ch->send_comm != nullptr) abort_channel(*ch, "construction failed");
    }
    throw;
  }
}

NcclTransport::~NcclTransport() {
  for (auto& ch_ptr : channels_) {
    Channel& ch = *ch_ptr;
    try {
      bool dirty = !ch.loopback && ch.sent.load() != ch.received.load();
      for (auto& f : ch.in_flight) dirty = dirty || !f.done->query();
      if (dirty) {
        abort_channel(ch, "transport destroyed with undelivered messages");
      } else {
        std::lock_guard<std::mutex> lock(ch.nccl_mutex);
        if (!ch.aborted) {
          // Nothing is pending: wait for the streams (bounded), then destroy.
          if (ch.send_stream) ch.send_stream->synchronize(options_.init_timeout_seconds, "NCCL transport shutdown");
          if (ch.recv_stream) ch.recv_stream->synchronize(options_.init_timeout_seconds, "NCCL transport shutdown");
          ncclResult_t r1 = ch.send_comm ? ncclCommDestroy(ch.send_comm) : ncclSuccess;
          ncclResult_t r2 = (ch.recv_comm && ch.recv_comm != ch.send_comm) ? ncclCommDestroy(ch.recv_comm) : ncclSuccess;
          ch.send_comm = ch.recv_comm = nullptr;
          ch.aborted = true;
          if (r1 != ncclSuccess) log(LogLevel::kError, nccl_error_message(r1, "NCCL transport: ncclCommDestroy"));
          if (r2 != ncclSuccess) log(LogLevel::kError, nccl_error_message(r2, "NCCL transport: ncclCommDestroy"));
        }
      }
    } catch (const std::exception& e) {
      log(LogLevel::kError, std::string("NCCL transport shutdown: ") + e.what());
      try {
        abort_channel(ch, "shutdown failed");
      } catch (...) {
      }
    }
  }
  for (auto& ch_ptr : channels_) {
    Channel& ch = *ch_ptr;
    try {
      for (auto& f : ch.in_flight) {
        if (ch.send_stream) drop_on_stream(f.payload, *ch.send_stream);
      }
      for (auto& m : ch.stash) {
        if (ch.send_stream) drop_on_stream(m.source, *ch.send_stream);
        if (ch.send_stream) drop_on_stream(m.tensor, ch.receive_stream());
      }
    } catch (const std::exception& e) {
      log(LogLevel::kError, std::string("NCCL transport shutdown: ") + e.what());
    }
  }
}

int NcclTransport::device_of(int rank) const {
  PF_CHECK_ARG(rank >= 0 && rank < num_ranks(), "NCCL transport: no rank ", rank, " (", num_ranks(), " ranks)");
  return devices_[rank];
}

Transport& NcclTransport::endpoint(int rank) {
  PF_CHECK_ARG(rank >= 0 && rank < num_ranks(), "NCCL transport: no rank ", rank, " (", num_ranks(), " ranks)");
  return *endpoints_[rank];
}

// Creates what is missing (streams, header buffers), then the communicators, and exchanges one
// header on them so that NCCL sets up its connections now rather than inside a later send.
void NcclTransport::open_channel(Channel& ch) {
  const std::string what = "NCCL transport: opening channel " + ch.describe();
  const int previous_device = current_device();
  if (!ch.send_stream) ch.send_stream = std::make_unique<CudaStream>(ch.src_device);
  if (!ch.loopback && !ch.recv_stream) ch.recv_stream = std::make_unique<CudaStream>(ch.dst_device);
  if (!ch.send_headers) ch.send_headers = std::make_unique<DeviceBuffer>(ch.src_device, ch.slots * kHeaderBytes);
  if (!ch.send_headers_host) ch.send_headers_host = std::make_unique<PinnedHostBuffer>(ch.slots * kHeaderBytes);
  if (!ch.recv_headers) {
    ch.recv_headers = std::make_unique<DeviceBuffer>(ch.dst_device, (ch.loopback ? ch.slots : 1) * kHeaderBytes);
  }
  if (!ch.recv_header_host) ch.recv_header_host = std::make_unique<PinnedHostBuffer>(kHeaderBytes);
  ch.free_send_slots.clear();
  for (int i = ch.slots - 1; i >= 0; --i) ch.free_send_slots.push_back(i);
  ch.sent = 0;
  ch.received = 0;

  std::lock_guard<std::mutex> lock(ch.nccl_mutex);
  ch.send_comm = ch.recv_comm = nullptr;
  ncclResult_t r;
  if (ch.loopback) {
    int dev = ch.src_device;
    ncclComm_t comm = nullptr;
    r = ncclCommInitAll(&comm, 1, &dev);
    ch.send_comm = ch.recv_comm = comm;
  } else {
    int devs[2] = {ch.src_device, ch.dst_device};
    ncclComm_t comms[2] = {nullptr, nullptr};
    r = ncclCommInitAll(comms, 2, devs);
    ch.send_comm = comms[0];
    ch.recv_comm = comms[1];
  }
  (void)cudaSetDevice(previous_device);  // NCCL may leave another device current
  check_nccl(r, what, ": ncclCommInitAll");
  ch.aborted = false;
  ch.abort_reason.clear();

  // Warm-up exchange: both sides from this thread, in one group.
  const CudaStream& rs = ch.receive_stream();
  nccl_group(what + ": warm-up exchange", [&]() {
    ncclResult_t s = ncclSend(ch.send_headers->slot(0), kHeaderBytes, ncclChar, ch.loopback ? 0 : 1, ch.send_comm,
                              ch.send_stream->get());
    if (s != ncclSuccess) return s;
    return ncclRecv(ch.recv_headers->slot(0), kHeaderBytes, ncclChar, 0, ch.recv_comm, rs.get());
  });
  CudaEvent sent(ch.src_device);
  sent.record(*ch.send_stream);
  CudaEvent got(ch.dst_device);
  got.record(rs);
  const auto deadline = deadline_after(options_.init_timeout_seconds);
  for (CudaEvent* e : {&sent, &got}) {
    if (e->wait(seconds_left(deadline), nullptr, what) != WaitResult::kDone) {
      for (ncclComm_t c : {ch.send_comm, ch.recv_comm == ch.send_comm ? nullptr : ch.recv_comm}) {
        if (c != nullptr) (void)ncclCommAbort(c);
      }
      ch.send_comm = ch.recv_comm = nullptr;
      ch.aborted = true;
      ch.abort_reason = "warm-up timed out";
      fail(ErrorCode::kTimeout, what, ": the warm-up exchange did not finish within ", options_.init_timeout_seconds,
           " s");
    }
  }
}

void NcclTransport::abort_channel(Channel& ch, const std::string& why) {
  std::lock_guard<std::mutex> lock(ch.nccl_mutex);
  if (ch.aborted) return;
  ch.aborted = true;
  ch.abort_reason = why;
  ncclComm_t comms[2] = {ch.send_comm, ch.recv_comm == ch.send_comm ? nullptr : ch.recv_comm};
  ch.send_comm = ch.recv_comm = nullptr;
  for (ncclComm_t c : comms) {
    if (c == nullptr) continue;
    ncclResult_t r = ncclCommAbort(c);
    if (r != ncclSuccess) log(LogLevel::kError, nccl_error_message(r, "NCCL transport: ncclCommAbort on channel " + ch.describe()));
  }
  log(LogLevel::kWarning, "NCCL transport: aborted channel " + ch.describe() + ": " + why);
}

std::string NcclTransport::cancel_reason() const {
  std::lock_guard<std::mutex> lock(cancel_mutex_);
  return cancel_reason_;
}

void NcclTransport::throw_cancelled(int self, const std::string& action, int peer) {
  fail(ErrorCode::kCancelled, "rank ", self, ": ", action, " (peer rank ", peer, ") cancelled: ", cancel_reason());
}

void NcclTransport::cancel(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(cancel_mutex_);
    if (cancelled_.load()) return;
    cancel_reason_ = reason;
    cancelled_.store(true, std::memory_order_release);
  }
  for (auto& ch : channels_) {
    if (!ch->loopback) continue;  // cross-rank waits poll the flag
    std::lock_guard<std::mutex> lock(ch->recv_mutex);
    ch->stash_changed.notify_all();
  }
}

bool NcclTransport::cancelled() const { return cancelled_.load(std::memory_order_acquire); }

size_t NcclTransport::pending_messages() const {
  size_t n = 0;
  for (auto& ch : channels_) {
    n += static_cast<size_t>(ch->stashed.load());
    if (!ch->loopback) n += static_cast<size_t>(ch->sent.load() - ch->received.load());
  }
  return n;
}

void NcclTransport::reset() {
  for (auto& ch_ptr : channels_) {
    Channel& ch = *ch_ptr;
    std::lock_guard<std::mutex> send_lock(ch.send_mutex);
    std::lock_guard<std::mutex> recv_lock(ch.recv_mutex);
    bool dirty = !ch.loopback && ch.sent.load() != ch.received.load();
    for (auto& f : ch.in_flight) dirty = dirty || !f.done->query();
    if (dirty) abort_channel(ch, "reset() with messages sent but not received");
    for (auto& f : ch.in_flight) drop_on_stream(f.payload, *ch.send_stream);
    ch.in_flight.clear();
    for (auto& m : ch.stash) {
      drop_on_stream(m.source, *ch.send_stream);
      drop_on_stream(m.tensor, ch.receive_stream());
    }
    ch.stash.clear();
    ch.stashed = 0;
    bool aborted;
    {
      std::lock_guard<std::mutex> lock(ch.nccl_mutex);
      aborted = ch.aborted;
    }
    if (aborted) {
      // The aborted kernels have ended; let the streams drain before new communicators use them.
      const std::string what = "NCCL transport reset: draining channel " + ch.describe();
      ch.send_stream->synchronize(options_.init_timeout_seconds, what);
      if (ch.recv_stream) ch.recv_stream->synchronize(options_.init_timeout_seconds, what);
      open_channel(ch);
      rebuilt_channels_.fetch_add(1);
    } else {
      ch.free_send_slots.clear();
      for (int i = ch.slots - 1; i >= 0; --i) ch.free_send_slots.push_back(i);
      if (ch.loopback) {
        ch.sent = 0;
        ch.received = 0;
      }
    }
  }
  std::lock_guard<std::mutex> lock(cancel_mutex_);
  cancel_reason_.clear();
  cancelled_.store(false, std::memory_order_release);
}

// ---- send ---------------------------------------------------------------------------------------

void NcclTransport::send(int from, int to, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  const std::string action = send_action_name(key);
  PF_CHECK_ARG(to >= 0 && to < num_ranks(), "rank ", from, ": ", action, " to invalid peer rank ", to, " (",
               num_ranks(), " ranks)");
  if (cancelled()) throw_cancelled(from, action, to);
  const int device = devices_[from];
  PF_CHECK_ARG(tensor.defined(), "rank ", from, ": ", action, " (micro-batch ", key.micro_batch, "): undefined tensor");
  PF_CHECK_ARG(tensor.device() == Device::cuda(device), "rank ", from, ": ", action, " (micro-batch ", key.micro_batch,
               "): the NCCL transport sends CUDA tensors on this rank's device cuda:", device,
               ", got a tensor on ", tensor.device().to_string());
  PF_CHECK_ARG(tensor.rank() <= kMaxDims, "rank ", from, ": ", action, ": tensors of rank ", tensor.rank(),
               " cannot be sent (at most ", kMaxDims, ")");
  Channel& ch = channel(from, to);
  if (ch.loopback) {
    send_loopback(ch, from, key, std::move(tensor), timeout_seconds);
    return;
  }
  const std::string what = "rank " + std::to_string(from) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") to rank " + std::to_string(to);
  std::lock_guard<std::mutex> send_lock(ch.send_mutex);
  DeviceScope device_scope(device);
  auto retire = [&]() {
    while (!ch.in_flight.empty() && ch.in_flight.front().done->query()) {
      drop_on_stream(ch.in_flight.front().payload, *ch.send_stream);
      ch.free_send_slots.push_back(ch.in_flight.front().slot);
      ch.in_flight.pop_front();
    }
  };
  retire();
  const auto deadline = deadline_after(timeout_seconds);
  while (static_cast<int>(ch.in_flight.size()) >= options_.max_pending_sends) {
    WaitResult r = ch.in_flight.front().done->wait(seconds_left(deadline), &cancelled_, what);
    if (r == WaitResult::kCancelled) {
      abort_channel(ch, what + ": cancelled while waiting for room");
      throw_cancelled(from, action, to);
    }
    if (r == WaitResult::kTimedOut) {
      abort_channel(ch, what + ": timed out");
      fail(ErrorCode::kTimeout, what, " timed out after ", timeout_seconds, " s: ", ch.in_flight.size(),
           " messages to that rank are not received yet (NCCL channel aborted; reset() the transport)");
    }
    retire();
  }

  const int slot = ch.free_send_slots.back();
  const int64_t seq = ch.sent.load();
  const Header header = make_header(seq, key, tensor, from);
  char* host_slot = ch.send_headers_host->as<char>() + static_cast<size_t>(slot) * kHeaderBytes;
  std::memcpy(host_slot, header.data(), kHeaderBytes);
  cudaStream_t stream = ch.send_stream->get();
  {
    // The payload is ready once the sender's current stream has passed everything issued so far.
    CudaEvent ready(device);
    ready.record(current_stream_for(device));
    ready.make_stream_wait(stream);
  }
  check_cuda(cudaMemcpyAsync(ch.send_headers->slot(slot), host_slot, kHeaderBytes, cudaMemcpyHostToDevice, stream),
             what, ": staging the header");
  {
    std::lock_guard<std::mutex> lock(ch.nccl_mutex);
    if (ch.aborted) {
      fail(ErrorCode::kNcclError, what, ": the channel was aborted (", ch.abort_reason,
           "); reset() the transport first");
    }
    try {
      nccl_group(what, [&]() {
        ncclResult_t r = ncclSend(ch.send_headers->slot(slot), kHeaderBytes, ncclChar, 1, ch.send_comm, stream);
        if (r == ncclSuccess && tensor.nbytes() > 0) {
          r = ncclSend(tensor.data<char>(), tensor.nbytes(), ncclChar, 1, ch.send_comm, stream);
        }
        return r;
      });
    } catch (...) {
      // What reached the stream is unknown: the channel cannot be trusted any more.
      ch.aborted = true;
      ch.abort_reason = "a send failed";
      for (ncclComm_t c : {ch.send_comm, ch.recv_comm}) {
        if (c != nullptr) (void)ncclCommAbort(c);
      }
      ch.send_comm = ch.recv_comm = nullptr;
      throw;
    }
  }
  ch.free_send_slots.pop_back();
  Channel::InFlight f;
  f.done = std::make_unique<CudaEvent>(device);
  f.done->record(stream);
  f.payload = std::move(tensor);
  f.slot = slot;
  ch.in_flight.push_back(std::move(f));
  ch.sent.fetch_add(1);
}

void NcclTransport::send_loopback(Channel& ch, int rank, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  const std::string action = send_action_name(key);
  const std::string what = "rank " + std::to_string(rank) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") to itself";
  const int device = ch.src_device;
  std::unique_lock<std::mutex> lock(ch.recv_mutex);
  const auto deadline = deadline_after(timeout_seconds);
  while (static_cast<int>(ch.stash.size()) >= options_.max_pending_sends) {
    if (cancelled()) {
      lock.unlock();
      throw_cancelled(rank, action, rank);
    }
    if (ch.stash_changed.wait_until(lock, deadline) == std::cv_status::timeout &&
        static_cast<int>(ch.stash.size()) >= options_.max_pending_sends) {
      fail(ErrorCode::kTimeout, what, " timed out after ", timeout_seconds, " s: the mailbox stayed full");
    }
  }
  // A free header slot: one not used by a message in the mailbox.
  std::vector<bool> used(static_cast<size_t>(ch.slots), false);
  for (auto& m : ch.stash) used[static_cast<size_t>(m.slot)] = true;
  int slot = 0;
  while (used[static_cast<size_t>(slot)]) ++slot;

  DeviceScope device_scope(device);
  Channel::Received m;
  m.key = key;
  m.slot = slot;
  m.expected = make_header(ch.sent.load(), key, tensor, rank);
  m.tensor = Tensor::empty(tensor.shape(), tensor.dtype(), Device::cuda(device));
  char* host_slot = ch.send_headers_host->as<char>() + static_cast<size_t>(slot) * kHeaderBytes;
  std::memcpy(host_slot, m.expected.data(), kHeaderBytes);
  cudaStream_t stream = ch.send_stream->get();
  {
    CudaEvent ready(device);
    ready.record(current_stream_for(device));
    ready.make_stream_wait(stream);
  }
  check_cuda(cudaMemcpyAsync(ch.send_headers->slot(slot), host_slot, kHeaderBytes, cudaMemcpyHostToDevice, stream),
             what, ": staging the header");
  {
    std::lock_guard<std::mutex> nccl_lock(ch.nccl_mutex);
    if (ch.aborted) {
      drop_on_stream(m.tensor, *ch.send_stream);
      fail(ErrorCode::kNcclError, what, ": the channel was aborted (", ch.abort_reason, "); reset() the transport first");
    }
    // Send and receive to oneself must be in the same group.
    nccl_group(what, [&]() {
      ncclComm_t comm = ch.send_comm;
      ncclResult_t r = ncclSend(ch.send_headers->slot(slot), kHeaderBytes, ncclChar, 0, comm, stream);
      if (r == ncclSuccess) r = ncclRecv(ch.recv_headers->slot(slot), kHeaderBytes, ncclChar, 0, comm, stream);
      if (r == ncclSuccess && tensor.nbytes() > 0) {
        r = ncclSend(tensor.data<char>(), tensor.nbytes(), ncclChar, 0, comm, stream);
        if (r == ncclSuccess) r = ncclRecv(m.tensor.data<char>(), tensor.nbytes(), ncclChar, 0, comm, stream);
      }
      return r;
    });
  }
  m.done = std::make_unique<CudaEvent>(device);
  m.done->record(stream);
  m.source = std::move(tensor);
  ch.stash.push_back(std::move(m));
  ch.stashed.fetch_add(1);
  ch.sent.fetch_add(1);
  lock.unlock();
  ch.stash_changed.notify_all();
}

// ---- recv ---------------------------------------------------------------------------------------

Tensor NcclTransport::recv(int self, int from, const MessageKey& key, double timeout_seconds) {
  const std::string action = recv_action_name(key);
  PF_CHECK_ARG(from >= 0 && from < num_ranks(), "rank ", self, ": ", action, " from invalid peer rank ", from, " (",
               num_ranks(), " ranks)");
  if (cancelled()) throw_cancelled(self, action, from);
  // Release the finished sends of this rank (the same thread owns them).
  for (int to = 0; to < num_ranks(); ++to) {
    Channel& out = channel(self, to);
    if (out.loopback) continue;
    std::lock_guard<std::mutex> lock(out.send_mutex);
    while (!out.in_flight.empty() && out.in_flight.front().done->query()) {
      drop_on_stream(out.in_flight.front().payload, *out.send_stream);
      out.free_send_slots.push_back(out.in_flight.front().slot);
      out.in_flight.pop_front();
    }
  }
  Channel& ch = channel(from, self);
  if (ch.loopback) return recv_loopback(ch, self, key, timeout_seconds);

  const int device = devices_[self];
  const std::string what = "rank " + std::to_string(self) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") from rank " + std::to_string(from);
  const auto deadline = deadline_after(timeout_seconds);
  std::lock_guard<std::mutex> recv_lock(ch.recv_mutex);
  DeviceScope device_scope(device);
  const CudaStream& stream = *ch.recv_stream;

  // Waits for `event`; on timeout or cancel aborts the channel, drops `pending` safely and throws.
  auto wait = [&](const CudaEvent& event, Tensor* pending, const char* phase) {
    WaitResult r = event.wait(seconds_left(deadline), &cancelled_, what);
    if (r == WaitResult::kDone) return;
    abort_channel(ch, what + (r == WaitResult::kTimedOut ? ": timed out waiting for " : ": cancelled waiting for ") + phase);
    if (pending != nullptr) drop_on_stream(*pending, stream);
    if (r == WaitResult::kCancelled) throw_cancelled(self, action, from);
    fail(ErrorCode::kTimeout, "rank ", self, ": ", action, " (micro-batch ", key.micro_batch, ") waited more than ",
         timeout_seconds, " s for rank ", from, " (NCCL, waiting for ", phase, " on cuda:", device,
         "); the channel was aborted, reset() the transport before the next step");
  };
  auto check_open = [&]() {
    if (ch.aborted) {
      fail(ErrorCode::kNcclError, what, ": the channel was aborted (", ch.abort_reason, "); reset() the transport first");
    }
  };

  for (auto it = ch.stash.begin(); it != ch.stash.end(); ++it) {
    if (it->key == key) {
      Channel::Received m = std::move(*it);
      ch.stash.erase(it);
      ch.stashed.fetch_sub(1);
      wait(*m.done, &m.tensor, "the payload");
      return std::move(m.tensor);
    }
  }

  while (true) {
    {
      std::lock_guard<std::mutex> lock(ch.nccl_mutex);
      check_open();
      nccl_group(what + ": receiving the header", [&]() {
        return ncclRecv(ch.recv_headers->slot(0), kHeaderBytes, ncclChar, 0, ch.recv_comm, stream.get());
      });
    }
    check_cuda(cudaMemcpyAsync(ch.recv_header_host->data(), ch.recv_headers->slot(0), kHeaderBytes,
                               cudaMemcpyDeviceToHost, stream.get()),
               what, ": reading the header");
    CudaEvent header_done(device);
    header_done.record(stream);
    wait(header_done, nullptr, "the message header");

    Header header;
    std::memcpy(header.data(), ch.recv_header_host->data(), kHeaderBytes);
    const std::string problem = check_header(header, ch.received.load(), from);
    if (!problem.empty()) {
      abort_channel(ch, what + ": corrupt header");
      fail(ErrorCode::kNcclError, what, ": corrupt message header (", problem,
           "); the channel was aborted, reset() the transport");
    }
    ch.received.fetch_add(1);
    const MessageKey got = header_key(header);
    Tensor t = Tensor::empty(header_shape(header), header_dtype(header), Device::cuda(device));
    if (t.nbytes() > 0) {
      std::lock_guard<std::mutex> lock(ch.nccl_mutex);
      if (ch.aborted) drop_on_stream(t, stream);
      check_open();
      nccl_group(what + ": receiving the payload", [&]() {
        return ncclRecv(t.data<char>(), t.nbytes(), ncclChar, 0, ch.recv_comm, stream.get());
      });
    }
    Tensor arrived = finish_receive(
        device, stream, got, key, std::move(t),
        [&](const CudaEvent& done, Tensor* pending) { wait(done, pending, "the payload"); },
        [&](const MessageKey& other, Tensor tensor, std::unique_ptr<CudaEvent> done) {
          Channel::Received m;
          m.key = other;
          m.tensor = std::move(tensor);
          m.done = std::move(done);
          ch.stash.push_back(std::move(m));
          ch.stashed.fetch_add(1);
        });
    if (arrived.defined()) return arrived;
  }
}

Tensor NcclTransport::recv_loopback(Channel& ch, int rank, const MessageKey& key, double timeout_seconds) {
  const std::string action = recv_action_name(key);
  const std::string what = "rank " + std::to_string(rank) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") from itself";
  const int device = ch.src_device;
  const auto deadline = deadline_after(timeout_seconds);
  std::unique_lock<std::mutex> lock(ch.recv_mutex);
  auto find = [&]() {
    for (auto it = ch.stash.begin(); it != ch.stash.end(); ++it) {
      if (it->key == key) return it;
    }
    return ch.stash.end();
  };
  auto it = find();
  while (it == ch.stash.end()) {
    if (cancelled()) {
      lock.unlock();
      throw_cancelled(rank, action, rank);
    }
    if (ch.stash_changed.wait_until(lock, deadline) == std::cv_status::timeout) {
      it = find();
      if (it != ch.stash.end()) break;
      fail(ErrorCode::kTimeout, "rank ", rank, ": ", action, " (micro-batch ", key.micro_batch, ") waited more than ",
           timeout_seconds, " s for rank ", rank, " (itself)");
    }
    it = find();
  }
  Channel::Received m = std::move(*it);
  ch.stash.erase(it);
  ch.stashed.fetch_sub(1);
  ch.stash_changed.notify_all();  // a sender may wait for room

  DeviceScope device_scope(device);
  const CudaStream& stream = *ch.send_stream;
  auto give_up = [&](WaitResult r) {
    abort_channel(ch, what + (r == WaitResult::kTimedOut ? ": timed out" : ": cancelled"));
    drop_on_stream(m.tensor, stream);
    drop_on_stream(m.source, stream);
    if (r == WaitResult::kCancelled) throw_cancelled(rank, action, rank);
    fail(ErrorCode::kTimeout, "rank ", rank, ": ", action, " (micro-batch ", key.micro_batch, ") waited more than ",
         timeout_seconds, " s for its own message (NCCL loopback on cuda:", device, ")");
  };
  // Read back the header NCCL delivered and compare it with the one sent.
  check_cuda(cudaMemcpyAsync(ch.recv_header_host->data(), ch.recv_headers->slot(m.slot), kHeaderBytes,
                             cudaMemcpyDeviceToHost, stream.get()),
             what, ": reading the header");
  CudaEvent header_done(device);
  header_done.record(stream);
  WaitResult r = m.done->wait(seconds_left(deadline), &cancelled_, what);
  if (r == WaitResult::kDone) r = header_done.wait(seconds_left(deadline), &cancelled_, what);
  if (r != WaitResult::kDone) give_up(r);
  Header header;
  std::memcpy(header.data(), ch.recv_header_host->data(), kHeaderBytes);
  if (header != m.expected) {
    drop_on_stream(m.tensor, stream);
    drop_on_stream(m.source, stream);
    const std::string problem = check_header(header, m.expected[kFieldSeq], rank);
    fail(ErrorCode::kNcclError, what, ": the header that arrived differs from the one sent (",
         problem.empty() ? std::string("different fields") : problem, ")");
  }
  ch.received.fetch_add(1);
  drop_on_stream(m.source, stream);
  return std::move(m.tensor);
}

}  // namespace pf::comm
