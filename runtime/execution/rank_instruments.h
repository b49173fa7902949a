// What watches a rank's actions without taking part in them: the measured timeline, the activation
// peaks at action boundaries, bubble filling (other work where the last step's timeline says the
// rank will wait) and the emulated fail-slow device (a compute action followed by a wait). The rank
// executor calls it around every action; nothing in the action handlers knows about it.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <vector>

#include "runtime/schedules/ir.h"
#include "runtime/schedules/timeline.h"

namespace pf::exec {

struct RankStats;

class RankInstruments {
 public:
  using clock_type = std::chrono::steady_clock;
  struct Options {
    bool record_timeline = true;  // timestamp every action
    double slow_factor = 1.0;     // > 1: each compute action is followed by (slow_factor - 1) x its duration
    // Bubble filling: runs other work for at most the given seconds, returns the seconds it took.
    std::function<double(double budget_seconds)> fill;
  };
  explicit RankInstruments(Options options) : options_(std::move(options)) {}

  // The seconds to fill before each action of the next synchronous step's list (and after its
  // last); empty: none.
  void set_fill_budgets(std::vector<double> before_action, double after_last) {
    fill_before_ = std::move(before_action);
    fill_after_ = after_last;
  }
  // A list of `actions` starts (fills only when the budgets were made for a list of this length and
  // `fills` is true: the synchronous step's list), timed from t0, its records going to `stats` and
  // `timed`.
  void begin(size_t actions, bool fills, clock_type::time_point t0, RankStats* stats,
             std::vector<sched::TimedAction>* timed);
  // Around action i: before it runs; after it ran (from `start`), with the rank's live activation
  // contexts and bytes then.
  void before(size_t i);
  void after(const sched::Action& a, clock_type::time_point start, int live, size_t live_bytes);
  // The list ended (the fill after the last action).
  void end();

 private:
  Options options_;
  std::vector<double> fill_before_;
  double fill_after_ = 0;
  bool filling_ = false;
  clock_type::time_point t0_;
  RankStats* stats_ = nullptr;
  std::vector<sched::TimedAction>* timed_ = nullptr;
};

}  // namespace pf::exec
