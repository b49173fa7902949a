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
  if (options_.record_timeline) {
    const auto end = clock_type::now();
    timed_->push_back({a, std::chrono::duration<double, std::micro>(start - t0_).count(),
                       std::chrono::duration<double, std::micro>(end - t0_).count()});
  }
  stats_->actions += 1;
}

void RankInstruments::end() {
  if (filling_ && fill_after_ > 0) stats_->fill_us += 1e6 * options_.fill(fill_after_);
  filling_ = false;
}

}  // namespace pf::exec
