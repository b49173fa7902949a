// One MPI world's failure notices. abort(reason) sends the reason to every other member on a
// communicator reserved for it (tag kAbortTag), without waiting more than about a second; every wait
// of that world (MpiTransport's recv and send, MpiWorld's collectives) calls poll() between tries,
// so the other members stop within a poll interval instead of at their timeouts.
#pragma once

#include <mpi.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pf::comm {

class MpiAbortChannel {
 public:
  static constexpr int kAbortTag = 1;
  static constexpr size_t kMaxReasonBytes = 1024;  // longer reasons are cut there

  // `comm` is borrowed and used by this channel alone; `rank` and `size` are this member's in it.
  MpiAbortChannel(MPI_Comm comm, int rank, int size);
  ~MpiAbortChannel();
  MpiAbortChannel(const MpiAbortChannel&) = delete;
  MpiAbortChannel& operator=(const MpiAbortChannel&) = delete;

  // Marks this member failed and posts "reason" to every other member. Best effort: sends that
  // have not completed after about a second are left to finish in the background.
  void abort(const std::string& reason);
  // Takes in any notice that has arrived (never blocks). True when the world is cancelled.
  bool poll();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // "rank F failed: <reason>" (empty while not cancelled).
  std::string cause() const;
  // Throws kCancelled "rank R: <what> cancelled: rank F failed: <reason>" when poll() is true.
  void check(const std::string& what);
  [[noreturn]] void throw_cancelled(const std::string& what) const;

 private:
  void mark(int failed_rank, const std::string& reason);

  MPI_Comm comm_;
  int rank_;
  int size_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::string cause_;
  // Notices this member sent: the buffer stays alive while a send may still read it.
  std::unique_ptr<std::string> sent_reason_;
  std::vector<MPI_Request> sends_;
};

}  // namespace pf::comm
