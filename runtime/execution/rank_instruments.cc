#include "runtime/execution/rank_instruments.h"

#include <algorithm>
#include <thread>

#include "runtime/execution/rank_executor.h"

namespace pf::exec {

void RankInstruments::begin(size_t actions, bool fills, clock_type::time_point t0, RankStats* stats,
                            std::vector<sched::TimedAction>* timed) {
  filling_ = fills && options_.fill && fill_before_.size() == actions;
  t0_ = t0;
  stats_ = stats;
  timed_ = timed;
  timed_->clear();
  if (options_.record_timeline) timed_->reserve(actions);
}

void RankInstruments::before(size_t i) {
  if (filling_ && fill_before_[i] > 0) stats_->fill_us += 1e6 * options_.fill(fill_before_[i]);
}

void RankInstruments::after(const sched::Action& a, clock_type::time_point start, int live, size_t live_bytes) {
  if (options_.slow_factor > 1.0 && sched::is_compute(a.kind))
    std::this_thread::sleep_for((clock_type::now() - start) * (options_.slow_factor - 1.0));
  // Peaks at action boundaries, after every action (F, B, RECOMPUTE, RELOAD and HOLD are the ones
  // that can raise them).
  stats_->peak_activation_bytes = std::max(stats_->peak_activation_bytes, live_bytes);
  stats_->peak_live_micro_batches = std::max(stats_->peak_live_micro_batches, live);
  // The rank's busy, communication and finish times, with or without a timeline (fail-slow
  // adaptation and the bubble rate read them).
  const auto end = clock_type::now();
  const double begin_us = std::chrono::duration<double, std::micro>(start - t0_).count();
  const double end_us = std::chrono::duration<double, std::micro>(end - t0_).count();
  // An asynchronous stage's UPDATE (its optimizer step) is work on the rank's critical path.
  if (sched::is_compute(a.kind) || a.kind == sched::ActionKind::kUpdate) stats_->busy_us += end_us - begin_us;
  else if (sched::is_communication(a.kind)) stats_->comm_us += end_us - begin_us;
  stats_->finish_us = std::max(stats_->finish_us, end_us);
  if (options_.record_timeline) timed_->push_back({a, begin_us, end_us});
  stats_->actions += 1;
}

void RankInstruments::end() {
  if (filling_ && fill_after_ > 0) stats_->fill_us += 1e6 * options_.fill(fill_after_);
  filling_ = false;
}

}  // namespace pf::exec
