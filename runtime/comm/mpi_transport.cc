#include "runtime/comm/mpi_transport.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "runtime/comm/keepalive.h"
#include "runtime/comm/mpi_process.h"
#include "runtime/comm/mpi_status.h"
#include "runtime/comm/poll.h"
#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf::comm {

namespace {

int comm_rank(MPI_Comm comm) {
  int rank = 0;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", -1);
  return rank;
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size", -1);
  return size;
}

// MPI_TAG_UB is an attribute of MPI_COMM_WORLD only (duplicates do not carry it); it holds for
// every communicator.
int64_t tag_ub() {
  int* value = nullptr;
  int found = 0;
  mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &found), "MPI_Comm_get_attr(MPI_TAG_UB)", -1);
  return found && value ? *value : 32767;  // the least the MPI standard guarantees
}

std::string peer_text(const std::string& action, int peer) {
  return action + " (peer rank " + std::to_string(peer) + ")";
}

constexpr double kWithdrawSeconds = 1.0;

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, std::shared_ptr<MpiAbortChannel> abort, Options options)
    : comm_(comm),
      abort_(std::move(abort)),
      options_(options),
      rank_(comm_rank(comm)),
      size_(comm_size(comm)),
      tags_(options.max_stages, options.max_micro_batches, tag_ub()) {
  PF_CHECK_ARG(abort_ != nullptr, "MPI transport: no abort channel");
  PF_CHECK_ARG(options_.max_pending_sends >= 1, "MPI transport: max_pending_sends must be >= 1, got ",
               options_.max_pending_sends);
  PF_CHECK_ARG(options_.max_message_bytes >= 0, "MPI transport: max_message_bytes must be >= 0, got ",
               options_.max_message_bytes);
  if (options_.max_message_bytes == 0) options_.max_message_bytes = limits::max_message_bytes();
  pending_.resize(static_cast<size_t>(size_));
  progress_ = std::thread([this] { progress_loop(); });
}

void MpiTransport::progress_loop() {
  std::unique_lock<std::mutex> wait_lock(progress_mutex_);
  while (true) {
    progress_cv_.wait(wait_lock, [&] { return stop_progress_ || sends_in_flight_.load() > 0; });
    if (stop_progress_) return;
    wait_lock.unlock();
    {
      std::lock_guard<std::mutex> background(mpi_background_mutex());
      if (mpi_finalizing()) return;
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        for (int to = 0; to < size_; ++to)
          if (!pending_[to].empty()) reap_locked(to);
      } catch (const Error&) {
        // The sender's next send or drain meets the same failure and reports it.
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    wait_lock.lock();
  }
}

MpiTransport::~MpiTransport() {
  {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    stop_progress_ = true;
  }
  progress_cv_.notify_all();
  if (progress_.joinable()) progress_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (int to = 0; to < size_; ++to) {
    try {
      reap_locked(to);
    } catch (const Error&) {
    }
    for (auto& p : pending_[to]) {
      // MPI keeps reading the tensor until the send completes: it outlives this transport.
      for (MPI_Request& r : p->requests) {
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
      }
      keep_until_exit(std::shared_ptr<PendingSend>(std::move(p)));
    }
  }
  try {
    reap_abandoned_locked();
  } catch (const Error&) {
  }
  for (Abandoned& a : abandoned_) {
    for (MPI_Request& r : a.requests) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    keep_until_exit(std::move(a.keepalive));
  }
}

MpiTransport::Wait MpiTransport::poll(std::vector<MPI_Request>* requests, std::vector<MPI_Status>* statuses,
                                      const Deadline& deadline, int peer, bool transfer) const {
  statuses->resize(requests->size());
  // Our own payloads in flight also advance only while this process calls MPI.
  Backoff backoff(transfer || sends_in_flight_.load(std::memory_order_relaxed) > 0);
  while (true) {
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(requests->size()), requests->data(), &done, statuses->data()),
              "MPI_Testall", rank_, peer);
    if (done) {
      backoff.succeeded();
      return Wait::kDone;
    }
    if (abort_->poll()) return Wait::kCancelled;
    if (deadline.passed()) return Wait::kTimedOut;
    backoff.pause();
  }
}

bool MpiTransport::withdraw(std::vector<MPI_Request>* requests, std::vector<MPI_Status>* statuses,
                            std::shared_ptr<void> keepalive) {
  for (MPI_Request& r : *requests) {
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  }
  const Deadline deadline(kWithdrawSeconds);
  Backoff backoff;
  statuses->resize(requests->size());
  int done = 0;
  while (true) {
    // An error here leaves the requests to the abandoned list rather than freeing their buffers.
    if (MPI_Testall(static_cast<int>(requests->size()), requests->data(), &done, statuses->data()) != MPI_SUCCESS) {
      done = 0;
      break;
    }
    if (done || deadline.passed()) break;
    backoff.pause();
  }
  if (!done) {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_.push_back(Abandoned{*requests, std::move(keepalive)});
    return false;
  }
  for (const MPI_Status& s : *statuses) {
    int cancelled = 0;
    MPI_Test_cancelled(&s, &cancelled);
    if (cancelled) return false;
  }
  return true;
}

void MpiTransport::reap_locked(int to) const {
  auto& queue = pending_[to];
  while (!queue.empty()) {
    auto& reqs = queue.front()->requests;
    int done = 0;
    mpi_check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE),
              "MPI_Testall (send)", rank_, to);
    if (!done) return;
    if (queue.front()->requests.size() > 1) sends_in_flight_.fetch_sub(1, std::memory_order_relaxed);
    queue.pop_front();
  }
}

void MpiTransport::reap_abandoned_locked() const {
  for (auto it = abandoned_.begin(); it != abandoned_.end();) {
    int done = 0;
    MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &done, MPI_STATUSES_IGNORE);
    it = done ? abandoned_.erase(it) : it + 1;
  }
}

size_t MpiTransport::pending_locked() const {
  size_t n = 0;
  for (int to = 0; to < size_; ++to) {
    reap_locked(to);
    n += pending_[to].size();
  }
  return n;
}

void MpiTransport::send(int to, const MessageKey& key, Tensor tensor, double timeout_seconds) {
  const std::string action = send_action_name(key);
  PF_CHECK_ARG(to >= 0 && to < size_ && to != rank_, "rank ", rank_, ": ", action, " to invalid peer rank ", to);
  tags_.check_key(key, "rank " + std::to_string(rank_) + ": " + action);
  PF_CHECK_ARG(tensor.defined(), "rank ", rank_, ": ", action, ": the tensor is empty (undefined)");
  PF_CHECK_ARG(tensor.device() == Device::cpu(), "rank ", rank_, ": ", action,
               ": the MPI transport sends host tensors; this one is on ", tensor.device().to_string());
  const Deadline deadline(timeout_seconds);
  auto p = std::make_unique<PendingSend>();
  p->key = key;
  p->header = std::make_unique<WireHeader>(make_wire_header(key, tensor));
  p->tensor = std::move(tensor);
  Backoff backoff(true);  // waiting for earlier sends to this peer to move
  while (true) {
    abort_->check(peer_text(action, to));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reap_locked(to);
      auto& queue = pending_[to];
      if (static_cast<int>(queue.size()) < options_.max_pending_sends) {
        PendingSend& s = *p;
        queue.push_back(std::move(p));  // before posting: a posted buffer must never be freed early
        s.requests.emplace_back(MPI_REQUEST_NULL);
        mpi_check(MPI_Isend(s.header.get(), sizeof(WireHeader), MPI_BYTE, to, tags_.header(key), comm_,
                            &s.requests.back()),
                  "MPI_Isend (header)", rank_, to);
        const char* data = s.header->payload_bytes > 0 ? s.tensor.data<char>() : nullptr;
        if (data != nullptr) {
          {
            std::lock_guard<std::mutex> wake(progress_mutex_);
            sends_in_flight_.fetch_add(1, std::memory_order_relaxed);
          }
          progress_cv_.notify_one();
        }
        for (size_t off = 0; off < s.header->payload_bytes; off += kPayloadChunkBytes) {
          const size_t n = std::min<size_t>(kPayloadChunkBytes, s.header->payload_bytes - off);
          s.requests.emplace_back(MPI_REQUEST_NULL);
          mpi_check(MPI_Isend(data + off, static_cast<int>(n), MPI_BYTE, to, tags_.payload(key), comm_,
                              &s.requests.back()),
                    "MPI_Isend (payload)", rank_, to);
        }
        return;
      }
    }
    if (deadline.passed()) {
      fail(ErrorCode::kTimeout, "rank ", rank_, ": ", action, " (micro-batch ", key.micro_batch, ") to rank ", to,
           " timed out after ", timeout_seconds, " s: ", options_.max_pending_sends,
           " earlier sends to it are still unfinished (max_pending_sends)");
    }
    backoff.pause();
  }
}

Tensor MpiTransport::recv(int from, const MessageKey& key, double timeout_seconds) {
  const std::string action = recv_action_name(key);
  PF_CHECK_ARG(from >= 0 && from < size_ && from != rank_, "rank ", rank_, ": ", action,
               " from invalid peer rank ", from);
  const std::string where = "rank " + std::to_string(rank_) + ": " + action;
  tags_.check_key(key, where);
  abort_->check(peer_text(action, from));
  const Deadline deadline(timeout_seconds);
  auto timed_out = [&](const char* phase) {
    fail(ErrorCode::kTimeout, where, " (micro-batch ", key.micro_batch, ") waited more than ", timeout_seconds,
         " s for rank ", from, phase);
  };

  auto header = std::make_shared<WireHeader>();
  std::vector<MPI_Request> requests(1, MPI_REQUEST_NULL);
  std::vector<MPI_Status> statuses;
  mpi_check(MPI_Irecv(header.get(), sizeof(WireHeader), MPI_BYTE, from, tags_.header(key), comm_, &requests[0]),
            "MPI_Irecv (header)", rank_, from);
  const Wait got_header = poll(&requests, &statuses, deadline, from, false);
  if (got_header != Wait::kDone) {
    // The header may have arrived while the wait gave up: then it is used, as if on time.
    const bool arrived = withdraw(&requests, &statuses, header);
    if (got_header == Wait::kCancelled) abort_->throw_cancelled(peer_text(action, from));
    if (!arrived) timed_out("");
  }
  int count = 0;
  MPI_Get_count(&statuses[0], MPI_BYTE, &count);
  if (count != static_cast<int>(sizeof(WireHeader))) {
    fail(ErrorCode::kDataLoss, where, " from rank ", from, ": the header has ", count, " bytes instead of ",
         sizeof(WireHeader));
  }
  const WireTensor wire =
      check_wire_header(*header, key, options_.max_message_bytes, where + " from rank " + std::to_string(from));

  Tensor out = Tensor::empty(wire.shape, wire.dtype);
  if (wire.bytes == 0) return out;
  requests.clear();
  char* data = out.data<char>();
  for (size_t off = 0; off < wire.bytes; off += kPayloadChunkBytes) {
    const size_t n = std::min(kPayloadChunkBytes, wire.bytes - off);
    requests.emplace_back(MPI_REQUEST_NULL);
    mpi_check(MPI_Irecv(data + off, static_cast<int>(n), MPI_BYTE, from, tags_.payload(key), comm_, &requests.back()),
              "MPI_Irecv (payload)", rank_, from);
  }
  const Wait got_payload = poll(&requests, &statuses, deadline, from, true);
  if (got_payload != Wait::kDone) {
    auto keepalive = std::make_shared<Tensor>(out);
    const bool arrived = withdraw(&requests, &statuses, keepalive);
    if (got_payload == Wait::kCancelled) abort_->throw_cancelled(peer_text(action, from));
    if (!arrived) {
      timed_out((" (the " + std::to_string(wire.bytes) + "-byte payload after its header)").c_str());
    }
  }
  return out;
}

size_t MpiTransport::pending_sends() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_locked();
}

void MpiTransport::drain(double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  Backoff backoff(true);
  while (true) {
    std::ostringstream unfinished;
    size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reap_abandoned_locked();
      n = pending_locked();
      if (n == 0) return;
      if (deadline.passed()) {
        const char* sep = "";
        for (int to = 0; to < size_; ++to) {
          if (pending_[to].empty()) continue;
          unfinished << sep << "to rank " << to << ": " << send_action_name(pending_[to].front()->key);
          if (pending_[to].size() > 1) unfinished << " and " << pending_[to].size() - 1 << " more";
          sep = "; ";
        }
      }
    }
    if (!unfinished.str().empty()) {
      fail(ErrorCode::kTimeout, "rank ", rank_, ": drain timed out after ", timeout_seconds, " s with ", n,
           " sends unfinished (", unfinished.str(), ")");
    }
    abort_->check("drain of " + std::to_string(n) + " unfinished sends");
    backoff.pause();
  }
}

}  // namespace pf::comm
