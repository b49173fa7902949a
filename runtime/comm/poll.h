// Waiting by polling: a deadline, and a backoff that neither burns a core nor adds much latency.
// MPI has no wait with a timeout, and ranks may share few cores (oversubscribed tests), so every
// MPI wait is MPI_Test in a loop with Backoff::pause() between tries.
#pragma once

#include <chrono>

namespace pf::comm {

class Deadline {
 public:
  // Throws kInvalidArgument unless timeout_seconds >= 0 (NaN included); very long timeouts are
  // capped at a year.
  explicit Deadline(double timeout_seconds);
  bool passed() const { return std::chrono::steady_clock::now() >= end_; }
  double timeout_seconds() const { return timeout_seconds_; }
  std::chrono::steady_clock::time_point end() const { return end_; }
  double seconds_left() const;

 private:
  std::chrono::steady_clock::time_point end_;
  double timeout_seconds_;
};

// One wait: first a spell of sched_yield (a message already on its way arrives without a sleep),
// then nanosleep starting at 2 us and doubling up to 128 us. The spell is 20 us, or up to 200 us
// while this thread's recent waits were short: twice the last successful wait when that was under
// 200 us. Without that, two ranks in a tight exchange would each find the other asleep and settle
// at one sleep per message. A transfer wait (data this process must move is in flight: Open MPI
// has no progress thread here, so a TCP transfer advances only while the process calls MPI) only
// yields for its first 5 ms.
class Backoff {
 public:
  Backoff() = default;
  explicit Backoff(bool transfer) : transfer_(transfer) {}
  void pause();
  // The wait succeeded: adapts this thread's spell to its length.
  void succeeded();

 private:
  std::chrono::steady_clock::time_point start_{};
  std::chrono::steady_clock::time_point spin_end_{};
  bool started_ = false;
  bool transfer_ = false;
  long sleep_ns_ = 2000;
};

}  // namespace pf::comm
