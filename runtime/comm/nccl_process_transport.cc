#include "runtime/comm/nccl_process_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <deque>
#include <exception>

#include "runtime/comm/nccl_support.h"
#include "runtime/comm/nccl_wire.h"
#include "runtime/comm/poll.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/pinned_host.h"
#include "runtime/devices/cuda/stream.h"

namespace pf::comm {

using cuda::check_cuda;
using cuda::check_nccl;
using cuda::CudaEvent;
using cuda::CudaStream;
using cuda::current_stream_for;
using cuda::DeviceScope;
using cuda::nccl_error_message;
using cuda::PinnedHostBuffer;
using nccl_support::Clock;
using nccl_support::deadline_after;
using nccl_support::DeviceBuffer;
using nccl_support::drop_on_stream;
using nccl_support::finish_receive;
using nccl_support::nccl_group;
using nccl_wire::check_header;
using nccl_wire::Header;
using nccl_wire::header_dtype;
using nccl_wire::header_key;
using nccl_wire::header_shape;
using nccl_wire::kHeaderBytes;
using nccl_wire::kMaxDims;
using nccl_wire::make_header;

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NcclId holds an ncclUniqueId");

namespace {

// The longest a destructor waits for its communicators to finalize before it aborts them.
constexpr double kFinalizeSeconds = 60.0;

}  // namespace

// ---- channels -----------------------------------------------------------------------------------

struct NcclProcessTransport::Channel {
  int from = 0, to = 0;
  bool sending = false;  // this process is `from` (rank 0 of the communicator), else `to` (rank 1)
  int slots = 1;         // header slots: sending max_pending_sends + 1, receiving 1

  // `comm` is used under nccl_mutex (issuing, polling its state, aborting it).
  std::mutex nccl_mutex;
  ncclComm_t comm = nullptr;
  bool aborted = false;
  std::string abort_reason;

  std::unique_ptr<CudaStream> stream;              // this side's: sends or receives
  std::unique_ptr<DeviceBuffer> headers;           // `slots` headers on the device
  std::unique_ptr<PinnedHostBuffer> host_headers;  // `slots` headers

  std::mutex state_mutex;  // what follows
  struct InFlight {        // sending side: kept until NCCL is done with it
    Tensor payload;
    std::unique_ptr<CudaEvent> done;
    int slot = 0;
  };
  std::deque<InFlight> in_flight;
  std::vector<int> free_slots;
  int64_t sent = 0;
  struct Received {  // receiving side: arrived for another key, kept for a later recv()
    MessageKey key;
    Tensor tensor;
    std::unique_ptr<CudaEvent> done;
  };
  std::deque<Received> stash;
  int64_t received = 0;

  int peer() const { return sending ? to : from; }
  std::string describe() const { return "rank " + std::to_string(from) + " -> rank " + std::to_string(to); }
};

struct NcclProcessTransport::Enqueue {
  std::function<ncclResult_t(ncclComm_t)> call;
};

class NcclProcessTransport::Endpoint final : public Transport {
 public:
  explicit Endpoint(NcclProcessTransport* owner) : owner_(owner) {}
  int rank() const override { return owner_->rank_; }
  int num_ranks() const override { return owner_->world_->size(); }
  void send(int to_rank, const MessageKey& key, Tensor tensor, double timeout_seconds) override {
    owner_->send(to_rank, key, std::move(tensor), timeout_seconds);
  }
  Tensor recv(int from_rank, const MessageKey& key, double timeout_seconds) override {
    return owner_->recv(from_rank, key, timeout_seconds);
  }

 private:
  NcclProcessTransport* owner_;
};

// ---- waits --------------------------------------------------------------------------------------

NcclProcessTransport::Wait NcclProcessTransport::poll(const std::function<bool()>& ready, TimePoint deadline) {
  Backoff backoff;
  while (true) {
    if (ready()) {
      backoff.succeeded();
      return Wait::kDone;
    }
    if (cancelled()) return Wait::kCancelled;
    if (world_->aborted()) {  // another process failed: as if cancelled with its reason
      cancel(world_->abort_cause());
      return Wait::kCancelled;
    }
    if (Clock::now() >= deadline) return ready() ? Wait::kDone : Wait::kTimedOut;
    backoff.pause();
  }
}

// Polls the communicator (nccl_mutex held) until it has left ncclInProgress. A failed state, a
// timeout or a cancel abort the channel and throw.
void NcclProcessTransport::wait_ready(Channel& ch, const std::string& what, TimePoint deadline,
                                      const std::string& action) {
  ncclResult_t state = ncclInProgress;
  const Wait w = poll(
      [&]() {
        const ncclResult_t r = ncclCommGetAsyncError(ch.comm, &state);
        if (r != ncclSuccess) state = r;
        return state != ncclInProgress;
      },
      deadline);
  if (w == Wait::kDone && state == ncclSuccess) return;
  const std::string why = w == Wait::kDone     ? nccl_error_message(state, what)
                          : w == Wait::kCancelled ? what + ": cancelled"
                                                 : what + ": timed out";
  abort_locked(ch, why);
  if (w == Wait::kCancelled) throw_cancelled(action, ch.peer());
  if (w == Wait::kTimedOut)
    fail(ErrorCode::kTimeout, what, ": NCCL was not ready within ", options_.init_timeout_seconds,
         " s (waiting for rank ", ch.peer(), " on host ", placements_.at(static_cast<size_t>(ch.peer())).host,
         "); the channel was aborted");
  cuda::throw_nccl_error(state, what);
}

// Runs enqueue(comm) in an NCCL group on the channel; ncclInProgress (non-blocking communicator)
// is waited out before it returns, so that nothing else reaches the channel's stream first.
void NcclProcessTransport::issue(Channel& ch, const std::string& what, const Enqueue& enqueue, TimePoint deadline,
                                 const std::string& action) {
  std::lock_guard<std::mutex> lock(ch.nccl_mutex);
  if (ch.aborted)
    fail(ErrorCode::kNcclError, what, ": the channel was aborted (", ch.abort_reason,
         "); a failed step leaves this world's channels aborted");
  ncclResult_t state;
  try {
    state = nccl_group(what, [&]() { return enqueue.call(ch.comm); }, ncclInProgress);
  } catch (...) {
    abort_locked(ch, what + ": failed");  // what reached the stream is unknown
    throw;
  }
  if (state == ncclInProgress) wait_ready(ch, what, deadline, action);
}

void NcclProcessTransport::abort_locked(Channel& ch, const std::string& why) {
  if (ch.aborted) return;
  ch.aborted = true;
  ch.abort_reason = why;
  if (ch.comm != nullptr) {
    const ncclResult_t r = ncclCommAbort(ch.comm);
    if (r != ncclSuccess) log(LogLevel::kError, nccl_error_message(r, "NCCL process transport: ncclCommAbort on " + ch.describe()));
    ch.comm = nullptr;
  }
  log(LogLevel::kWarning, "NCCL process transport: aborted channel " + ch.describe() + ": " + why);
}

void NcclProcessTransport::abort_channel(Channel& ch, const std::string& why) {
  std::lock_guard<std::mutex> lock(ch.nccl_mutex);
  abort_locked(ch, why);
}

// ---- construction and shutdown ------------------------------------------------------------------

NcclProcessTransport::NcclProcessTransport(std::shared_ptr<World> world, int device,
                                           const std::vector<std::pair<int, int>>& talking, Options options)
    : world_(std::move(world)), device_(device), options_(options), self_(world_ ? world_->size() : 1) {
  PF_CHECK_ARG(world_ != nullptr, "NCCL process transport: no world");
  PF_CHECK_ARG(options_.max_pending_sends >= 1, "NCCL process transport: max_pending_sends must be >= 1, got ",
               options_.max_pending_sends);
  PF_CHECK_ARG(options_.init_timeout_seconds > 0, "NCCL process transport: init_timeout_seconds must be > 0, got ",
               options_.init_timeout_seconds);
  rank_ = world_->rank();
  for (const auto& [a, b] : talking)
    PF_CHECK_ARG(a >= 0 && a < world_->size() && b >= 0 && b < world_->size(), "NCCL process transport: no rank pair (",
                 a, ", ", b, ") in a world of ", world_->size());
  cuda::check_device_ordinal(device_, "NCCL process transport");
  endpoint_ = std::make_unique<Endpoint>(this);
  const std::vector<std::pair<int, int>> channels = nccl_channels(talking);
  placements_ = gather_placements(*world_, this_process(device_), options_.init_timeout_seconds);
  // Every member has the same placements: all refuse alike, and the world stays usable.
  const std::string problem = shared_device_problem(placements_, channels);
  if (!problem.empty()) fail(ErrorCode::kInvalidArgument, "NCCL process transport: ", problem);
  try {
    open_channels(channels);
  } catch (const std::exception& e) {
    for (auto& ch : channels_) abort_channel(*ch, "setting up failed");
    // The other members may wait for this one inside NCCL: tell them why.
    if (!world_->aborted()) world_->abort(std::string("setting up NCCL on cuda:") + std::to_string(device_) + ": " + e.what());
    throw;
  }
}

void NcclProcessTransport::open_channels(const std::vector<std::pair<int, int>>& channels) {
  const double timeout = options_.init_timeout_seconds;
  const std::vector<NcclId> ids = broadcast_nccl_ids(
      *world_, static_cast<int>(channels.size()),
      [](NcclId* id) {
        ncclUniqueId u;
        check_nccl(ncclGetUniqueId(&u), "NCCL process transport: ncclGetUniqueId");
        std::memcpy(id->data(), u.internal, kNcclIdBytes);
      },
      timeout);
  const auto deadline = deadline_after(timeout);
  DeviceScope scope(device_);
  const std::string setup = "NCCL setup";
  for (size_t i = 0; i < channels.size(); ++i) {
    const auto [from, to] = channels[i];
    if (from != rank_ && to != rank_) continue;
    auto ch = std::make_unique<Channel>();
    ch->from = from;
    ch->to = to;
    ch->sending = from == rank_;
    ch->slots = ch->sending ? options_.max_pending_sends + 1 : 1;
    ch->stream = std::make_unique<CudaStream>(device_);
    ch->headers = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(ch->slots) * kHeaderBytes);
    ch->host_headers = std::make_unique<PinnedHostBuffer>(static_cast<size_t>(ch->slots) * kHeaderBytes);
    for (int s = ch->slots - 1; s >= 0; --s) ch->free_slots.push_back(s);
    ncclUniqueId id;
    std::memcpy(id.internal, ids[i].data(), kNcclIdBytes);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait below polls, with the deadline and the world's aborts
    Channel& c = *ch;
    channels_.push_back(std::move(ch));
    std::lock_guard<std::mutex> lock(c.nccl_mutex);
    const ncclResult_t r = ncclCommInitRankConfig(&c.comm, 2, id, c.sending ? 0 : 1, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      c.comm = nullptr;
      c.aborted = true;
      cuda::throw_nccl_error(r, "NCCL process transport: ncclCommInitRankConfig for " + c.describe());
    }
  }
  for (auto& ch : channels_) {
    std::lock_guard<std::mutex> lock(ch->nccl_mutex);
    wait_ready(*ch, "NCCL process transport: creating the communicator of " + ch->describe(), deadline, setup);
  }
  // Warm-up: one header each way, all posted before any is waited for (each channel has its own
  // communicator and stream), so that NCCL connects now rather than inside a step.
  std::vector<ncclResult_t> posted;
  for (auto& ch : channels_) {
    const std::string what = "NCCL process transport: warming up " + ch->describe();
    std::lock_guard<std::mutex> lock(ch->nccl_mutex);
    posted.push_back(nccl_group(
        what,
        [&]() {
          return ch->sending ? ncclSend(ch->headers->slot(0), kHeaderBytes, ncclChar, 1, ch->comm, ch->stream->get())
                             : ncclRecv(ch->headers->slot(0), kHeaderBytes, ncclChar, 0, ch->comm, ch->stream->get());
        },
        ncclInProgress));
  }
  std::vector<std::unique_ptr<CudaEvent>> done;
  for (size_t i = 0; i < channels_.size(); ++i) {
    Channel& ch = *channels_[i];
    std::lock_guard<std::mutex> lock(ch.nccl_mutex);
    if (posted[i] == ncclInProgress) wait_ready(ch, "NCCL process transport: warming up " + ch.describe(), deadline, setup);
    done.push_back(std::make_unique<CudaEvent>(device_));
    done.back()->record(*ch.stream);
  }
  for (size_t i = 0; i < channels_.size(); ++i) {
    Channel& ch = *channels_[i];
    const Wait w = poll([&]() { return done[i]->query(); }, deadline);
    if (w == Wait::kCancelled) throw_cancelled(setup, ch.peer());
    if (w == Wait::kTimedOut) {
      const ProcessPlacement& peer = placements_.at(static_cast<size_t>(ch.peer()));
      fail(ErrorCode::kTimeout, "rank ", rank_, ": NCCL setup: the warm-up exchange of ", ch.describe(),
           " did not finish within ", timeout, " s (rank ", ch.peer(), ": host ", peer.host, ", process ", peer.pid,
           ", cuda:", peer.device, ")");
    }
  }
}

NcclProcessTransport::~NcclProcessTransport() {
  try {
    close_channels();
  } catch (const std::exception& e) {
    log(LogLevel::kError, std::string("NCCL process transport shutdown: ") + e.what());
  }
}

// Finalizes every channel that is idle (in parallel: the calls do not block), then destroys it;
// aborts the others and those whose finalize fails or does not end in time.
void NcclProcessTransport::close_channels() {
  const bool failed = cancelled() || world_->aborted();
  std::vector<Channel*> finalizing;
  for (auto& ch_ptr : channels_) {
    Channel& ch = *ch_ptr;
    std::lock_guard<std::mutex> state(ch.state_mutex);
    std::lock_guard<std::mutex> lock(ch.nccl_mutex);
    bool idle = !failed && !ch.aborted && ch.stream->query();
    for (auto& f : ch.in_flight) idle = idle && f.done->query();
    for (auto& f : ch.in_flight) drop_on_stream(f.payload, *ch.stream);
    ch.in_flight.clear();
    for (auto& m : ch.stash) drop_on_stream(m.tensor, *ch.stream);
    ch.stash.clear();
    if (ch.aborted) continue;
    if (!idle) {
      abort_locked(ch, failed ? "the world failed" : "transport destroyed with unfinished messages");
      continue;
    }
    const ncclResult_t r = ncclCommFinalize(ch.comm);
    if (r == ncclSuccess || r == ncclInProgress) {
      finalizing.push_back(&ch);
    } else {
      abort_locked(ch, nccl_error_message(r, "ncclCommFinalize"));
    }
  }
  const auto deadline = deadline_after(std::min(options_.init_timeout_seconds, kFinalizeSeconds));
  for (Channel* ch : finalizing) {
    std::lock_guard<std::mutex> lock(ch->nccl_mutex);
    ncclResult_t state = ncclInProgress;
    Backoff backoff;
    while (true) {
      if (ncclCommGetAsyncError(ch->comm, &state) != ncclSuccess) state = ncclInternalError;
      if (state != ncclInProgress || Clock::now() >= deadline) break;
      backoff.pause();
    }
    if (state != ncclSuccess) {
      abort_locked(*ch, state == ncclInProgress ? std::string("finalizing did not end in time")
                                                : nccl_error_message(state, "ncclCommFinalize"));
      continue;
    }
    const ncclResult_t r = ncclCommDestroy(ch->comm);
    ch->comm = nullptr;
    ch->aborted = true;
    ch->abort_reason = "destroyed";
    if (r != ncclSuccess) log(LogLevel::kError, nccl_error_message(r, "NCCL process transport: ncclCommDestroy"));
  }
}

// ---- endpoint, cancel, reset --------------------------------------------------------------------

NcclProcessTransport::Channel* NcclProcessTransport::channel(int from, int to) const {
  for (auto& ch : channels_)
    if (ch->from == from && ch->to == to) return ch.get();
  return nullptr;
}

Transport& NcclProcessTransport::endpoint(int rank) {
  PF_CHECK_ARG(rank == rank_, "NCCL process transport: rank ", rank, " runs in another process (this one is rank ",
               rank_, ")");
  return *endpoint_;
}

std::string NcclProcessTransport::cancel_reason() const {
  std::lock_guard<std::mutex> lock(cancel_mutex_);
  return cancel_reason_;
}

void NcclProcessTransport::throw_cancelled(const std::string& action, int peer) {
  fail(ErrorCode::kCancelled, "rank ", rank_, ": ", action, " (peer rank ", peer, ") cancelled: ", cancel_reason());
}

void NcclProcessTransport::cancel(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(cancel_mutex_);
    if (cancelled_.load()) return;
    cancel_reason_ = reason;
    cancelled_.store(true, std::memory_order_release);
  }
  self_.cancel(reason);
}

bool NcclProcessTransport::cancelled() const { return cancelled_.load(std::memory_order_acquire); }

void NcclProcessTransport::release_finished_sends(Channel& ch) {
  while (!ch.in_flight.empty() && ch.in_flight.front().done->query()) {
    drop_on_stream(ch.in_flight.front().payload, *ch.stream);
    ch.free_slots.push_back(ch.in_flight.front().slot);
    ch.in_flight.pop_front();
  }
}

void NcclProcessTransport::reset() {
  bool aborted = world_->aborted();
  for (auto& ch : channels_) {
    std::lock_guard<std::mutex> state(ch->state_mutex);
    release_finished_sends(*ch);
    for (auto& m : ch->stash) drop_on_stream(m.tensor, *ch->stream);
    ch->stash.clear();
    std::lock_guard<std::mutex> lock(ch->nccl_mutex);
    aborted = aborted || ch->aborted;
  }
  self_.reset();  // also clears its own cancel state
  if (aborted) {
    if (!cancelled()) cancel(world_->aborted() ? world_->abort_cause() : "an NCCL channel of this process was aborted");
    self_.cancel(cancel_reason());
    return;
  }
  std::lock_guard<std::mutex> lock(cancel_mutex_);
  cancel_reason_.clear();
  cancelled_.store(false, std::memory_order_release);
}

size_t NcclProcessTransport::pending_messages() const {
  size_t n = self_.pending_messages();
  for (auto& ch : channels_) {
    std::lock_guard<std::mutex> state(ch->state_mutex);
    n += ch->stash.size();
    for (auto& f : ch->in_flight) n += f.done->query() ? 0 : 1;
  }
  return n;
}

// ---- send ---------------------------------------------------------------------------------------

void NcclProcessTransport::send(int to, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  const std::string action = send_action_name(key);
  PF_CHECK_ARG(to >= 0 && to < world_->size(), "rank ", rank_, ": ", action, " to invalid peer rank ", to, " (",
               world_->size(), " ranks)");
  if (cancelled() || world_->aborted()) {
    if (!cancelled()) cancel(world_->abort_cause());
    throw_cancelled(action, to);
  }
  PF_CHECK_ARG(tensor.defined(), "rank ", rank_, ": ", action, " (micro-batch ", key.micro_batch, "): undefined tensor");
  PF_CHECK_ARG(tensor.device() == Device::cuda(device_), "rank ", rank_, ": ", action, " (micro-batch ",
               key.micro_batch, "): the NCCL transport sends CUDA tensors on this process's device cuda:", device_,
               ", got a tensor on ", tensor.device().to_string());
  if (to == rank_) {
    self_.endpoint(rank_).send(to, key, std::move(tensor), timeout_seconds);  // one thread, one stream
    return;
  }
  PF_CHECK_ARG(tensor.rank() <= kMaxDims, "rank ", rank_, ": ", action, ": tensors of rank ", tensor.rank(),
               " cannot be sent (at most ", kMaxDims, ")");
  PF_CHECK_ARG(key.kind == MessageKind::kActivation || key.kind == MessageKind::kGradient, "rank ", rank_, ": ",
               action, ": the NCCL transport carries activations and gradients only");
  Channel* ch = channel(rank_, to);
  PF_CHECK_ARG(ch != nullptr, "rank ", rank_, ": ", action, " to rank ", to,
               ": no NCCL channel was set up for this pair (the ranks that talk are given at construction)");
  const std::string what = "rank " + std::to_string(rank_) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") to rank " + std::to_string(to);
  DeviceScope device_scope(device_);
  std::lock_guard<std::mutex> state(ch->state_mutex);
  release_finished_sends(*ch);
  const auto deadline = deadline_after(timeout_seconds);
  while (static_cast<int>(ch->in_flight.size()) >= options_.max_pending_sends) {
    const Wait w = poll([&]() { return ch->in_flight.front().done->query(); }, deadline);
    if (w == Wait::kCancelled) {
      abort_channel(*ch, what + ": cancelled while waiting for room");
      throw_cancelled(action, to);
    }
    if (w == Wait::kTimedOut) {
      abort_channel(*ch, what + ": timed out");
      fail(ErrorCode::kTimeout, what, " timed out after ", timeout_seconds, " s: ", ch->in_flight.size(),
           " messages to that rank are not received yet (NCCL channel aborted)");
    }
    release_finished_sends(*ch);
  }
  const int slot = ch->free_slots.back();
  const Header header = make_header(ch->sent, key, tensor, rank_);
  char* host_slot = ch->host_headers->as<char>() + static_cast<size_t>(slot) * kHeaderBytes;
  std::memcpy(host_slot, header.data(), kHeaderBytes);
  cudaStream_t stream = ch->stream->get();
  {
    // The payload is ready once the sender's current stream has passed everything issued so far.
    CudaEvent ready(device_);
    ready.record(current_stream_for(device_));
    ready.make_stream_wait(stream);
  }
  check_cuda(cudaMemcpyAsync(ch->headers->slot(slot), host_slot, kHeaderBytes, cudaMemcpyHostToDevice, stream), what,
             ": staging the header");
  const Enqueue send_both{[&](ncclComm_t comm) {
    ncclResult_t r = ncclSend(ch->headers->slot(slot), kHeaderBytes, ncclChar, 1, comm, stream);
    if (r == ncclSuccess && tensor.nbytes() > 0) r = ncclSend(tensor.data<char>(), tensor.nbytes(), ncclChar, 1, comm, stream);
    return r;
  }};
  issue(*ch, what, send_both, deadline, action);
  ch->free_slots.pop_back();
  Channel::InFlight f;
  f.done = std::make_unique<CudaEvent>(device_);
  f.done->record(*ch->stream);
  f.payload = std::move(tensor);
  f.slot = slot;
  ch->in_flight.push_back(std::move(f));
  ++ch->sent;
}

// ---- recv ---------------------------------------------------------------------------------------

Tensor NcclProcessTransport::recv(int from, const MessageKey& key, double timeout_seconds) {
  const std::string action = recv_action_name(key);
  PF_CHECK_ARG(from >= 0 && from < world_->size(), "rank ", rank_, ": ", action, " from invalid peer rank ", from,
               " (", world_->size(), " ranks)");
  if (cancelled() || world_->aborted()) {
    if (!cancelled()) cancel(world_->abort_cause());
    throw_cancelled(action, from);
  }
  if (from == rank_) return self_.endpoint(rank_).recv(from, key, timeout_seconds);
  for (auto& out : channels_) {  // the same thread owns this process's sends
    if (!out->sending) continue;
    std::lock_guard<std::mutex> state(out->state_mutex);
    release_finished_sends(*out);
  }
  Channel* ch = channel(from, rank_);
  PF_CHECK_ARG(ch != nullptr, "rank ", rank_, ": ", action, " from rank ", from,
               ": no NCCL channel was set up for this pair (the ranks that talk are given at construction)");
  const std::string what = "rank " + std::to_string(rank_) + ": " + action + " (micro-batch " +
                           std::to_string(key.micro_batch) + ") from rank " + std::to_string(from);
  const auto deadline = deadline_after(timeout_seconds);
  DeviceScope device_scope(device_);
  std::lock_guard<std::mutex> state(ch->state_mutex);
  const CudaStream& stream = *ch->stream;

  // Waits for `event`; on timeout or cancel aborts the channel, drops `pending` safely and throws.
  auto wait = [&](const CudaEvent& event, Tensor* pending, const char* phase) {
    const Wait w = poll([&]() { return event.query(); }, deadline);
    if (w == Wait::kDone) return;
    abort_channel(*ch, what + (w == Wait::kTimedOut ? ": timed out waiting for " : ": cancelled waiting for ") + phase);
    if (pending != nullptr) drop_on_stream(*pending, stream);
    if (w == Wait::kCancelled) throw_cancelled(action, from);
    fail(ErrorCode::kTimeout, "rank ", rank_, ": ", action, " (micro-batch ", key.micro_batch, ") waited more than ",
         timeout_seconds, " s for rank ", from, " (NCCL, waiting for ", phase, " on cuda:", device_,
         "); the channel was aborted");
  };

  for (auto it = ch->stash.begin(); it != ch->stash.end(); ++it) {
    if (it->key == key) {
      Channel::Received m = std::move(*it);
      ch->stash.erase(it);
      wait(*m.done, &m.tensor, "the payload");
      return std::move(m.tensor);
    }
  }
  while (true) {
    const Enqueue receive_header{
        [&](ncclComm_t comm) { return ncclRecv(ch->headers->slot(0), kHeaderBytes, ncclChar, 0, comm, stream.get()); }};
    issue(*ch, what + ": receiving the header", receive_header, deadline, action);
    check_cuda(cudaMemcpyAsync(ch->host_headers->data(), ch->headers->slot(0), kHeaderBytes, cudaMemcpyDeviceToHost,
                               stream.get()),
               what, ": reading the header");
    CudaEvent header_done(device_);
    header_done.record(stream);
    wait(header_done, nullptr, "the message header");

    Header header;
    std::memcpy(header.data(), ch->host_headers->data(), kHeaderBytes);
    const std::string problem = check_header(header, ch->received, from);
    if (!problem.empty()) {
      abort_channel(*ch, what + ": corrupt header");
      fail(ErrorCode::kNcclError, what, ": corrupt message header (", problem, "); the channel was aborted");
    }
    ++ch->received;
    const MessageKey got = header_key(header);
    Tensor t = Tensor::empty(header_shape(header), header_dtype(header), Device::cuda(device_));
    if (t.nbytes() > 0) {
      try {
        const Enqueue receive_payload{
            [&](ncclComm_t comm) { return ncclRecv(t.data<char>(), t.nbytes(), ncclChar, 0, comm, stream.get()); }};
        issue(*ch, what + ": receiving the payload", receive_payload, deadline, action);
      } catch (...) {
        drop_on_stream(t, stream);
        throw;
      }
    }
    Tensor arrived = finish_receive(
        device_, stream, got, key, std::move(t),
        [&](const CudaEvent& done, Tensor* pending) { wait(done, pending, "the payload"); },
        [&](const MessageKey& other, Tensor tensor, std::unique_ptr<CudaEvent> done) {
          ch->stash.push_back(Channel::Received{other, std::move(tensor), std::move(done)});
        });
    if (arrived.defined()) return arrived;
  }
}

}  // namespace pf::comm
