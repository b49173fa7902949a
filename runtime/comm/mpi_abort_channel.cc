#include "runtime/comm/mpi_abort_channel.h"

#include <algorithm>

#include "runtime/comm/keepalive.h"
#include "runtime/comm/mpi_status.h"
#include "runtime/comm/poll.h"
#include "runtime/core/error.h"

namespace pf::comm {

MpiAbortChannel::MpiAbortChannel(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

MpiAbortChannel::~MpiAbortChannel() {
  std::lock_guard<std::mutex> lock(mutex_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (sends_.empty() || finalized) return;
  int done = 0;
  MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE);
  if (!done) {
    // A peer that never receives: the sends may still read the reason, so it outlives this object.
    for (MPI_Request& r : sends_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    keep_until_exit(std::shared_ptr<std::string>(std::move(sent_reason_)));
  }
}

void MpiAbortChannel::mark(int failed_rank, const std::string& reason) {
  // Under mutex_.
  if (aborted_.load(std::memory_order_relaxed)) return;
  cause_ = "rank " + std::to_string(failed_rank) + " failed: " + reason;
  aborted_.store(true, std::memory_order_release);
}

void MpiAbortChannel::abort(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (sent_reason_) return;  // this member has told the others already
  mark(rank_, reason);
  sent_reason_ = std::make_unique<std::string>(reason.substr(0, kMaxReasonBytes));
  const int bytes = static_cast<int>(sent_reason_->size());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request request = MPI_REQUEST_NULL;
    // Best effort: a failed send only means that peer learns of the failure later (or not at all).
    if (MPI_Isend(sent_reason_->data(), bytes, MPI_CHAR, peer, kAbortTag, comm_, &request) == MPI_SUCCESS) {
      sends_.push_back(request);
    }
  }
  const Deadline deadline(1.0);
  Backoff backoff;
  int done = sends_.empty();
  while (!done && !deadline.passed()) {
    if (MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
    if (!done) backoff.pause();
  }
}

bool MpiAbortChannel::poll() {
  if (aborted_.load(std::memory_order_acquire)) return true;  // the first notice is the cause
  std::lock_guard<std::mutex> lock(mutex_);
  while (!aborted_.load(std::memory_order_relaxed)) {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, kAbortTag, comm_, &found, &message, &status) != MPI_SUCCESS || !found) break;
    int count = 0;
    MPI_Get_count(&status, MPI_CHAR, &count);
    // A notice is at most kMaxReasonBytes from this library; take whatever length arrived, bounded.
    std::string text(static_cast<size_t>(std::clamp(count, 0, 1 << 20)), '\0');
    if (MPI_Mrecv(text.data(), static_cast<int>(text.size()), MPI_CHAR, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      text = "(the reason could not be received)";
    }
    if (text.size() > kMaxReasonBytes) text.resize(kMaxReasonBytes);
    mark(status.MPI_SOURCE, text);
  }
  return aborted_.load(std::memory_order_acquire);
}

std::string MpiAbortChannel::cause() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cause_;
}

void MpiAbortChannel::check(const std::string& what) {
  if (poll()) throw_cancelled(what);
}

void MpiAbortChannel::throw_cancelled(const std::string& what) const {
  fail(ErrorCode::kCancelled, "rank ", rank_, ": ", what, " cancelled: ", cause());
}

}  // namespace pf::comm

