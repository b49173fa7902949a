#include "runtime/comm/poll.h"

#include <sched.h>
#include <time.h>

#include <algorithm>

#include "runtime/core/error.h"

namespace pf::comm {

namespace {
constexpr double kMaxTimeoutSeconds = 365.0 * 24 * 3600;
constexpr auto kMinSpin = std::chrono::microseconds(20);
constexpr auto kMaxSpin = std::chrono::microseconds(200);
constexpr long kMaxSleepNs = 128000;
constexpr auto kTransferSpin = std::chrono::milliseconds(5);

thread_local std::chrono::steady_clock::duration t_spin = kMinSpin;
}  // namespace

Deadline::Deadline(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  PF_CHECK_ARG(timeout_seconds >= 0, "timeout must be a number of seconds >= 0, got ", timeout_seconds);
  const double capped = std::min(timeout_seconds, kMaxTimeoutSeconds);
  end_ = std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(capped));
}

double Deadline::seconds_left() const {
  const double left = std::chrono::duration<double>(end_ - std::chrono::steady_clock::now()).count();
  return left > 0 ? left : 0;
}

void Backoff::pause() {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
    spin_end_ = now + t_spin;
  }
  if (now < spin_end_ || (transfer_ && now < start_ + kTransferSpin)) {
    sched_yield();
    return;
  }
  timespec ts{0, sleep_ns_};
  nanosleep(&ts, nullptr);
  sleep_ns_ = std::min(sleep_ns_ * 2, kMaxSleepNs);
}

void Backoff::succeeded() {
  if (!started_) return;  // done at the first try: keep the spell
  const auto waited = std::chrono::steady_clock::now() - start_;
  t_spin = waited < kMaxSpin ? std::clamp<std::chrono::steady_clock::duration>(2 * waited, kMinSpin, kMaxSpin)
                             : std::chrono::steady_clock::duration(kMinSpin);
}

}  // namespace pf::comm
