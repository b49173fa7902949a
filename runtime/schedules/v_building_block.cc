#include "runtime/schedules/v_building_block.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "runtime/schedules/generator_parts.h"

namespace pf::sched {
namespace {

constexpr double kEps = 1e-9;

// The busy intervals of one rank on a circle of length `period`.
class Circle {
 public:
  explicit Circle(double period) : period_(period) {}

  // The earliest start >= t at which [start, start + length) overlaps nothing reserved, or a
  // negative value when none exists within one period past t.
  double earliest_free(double t, double length) const {
    double start = t;
    for (int guard = 0; guard <= static_cast<int>(busy_.size()) + 1; ++guard) {
      const double conflict_end = overlap_end(start, length);
      if (conflict_end < 0) return start;
      start = conflict_end;
      if (start > t + period_ + kEps) break;
    }
    return -1.0;
  }
  void reserve(double start, double length) {
    if (length > 0) busy_.emplace_back(fold(start), length);
  }

 private:
  double fold(double t) const { return t - period_ * std::floor(t / period_ + kEps); }
  // The end (on the unfolded axis of `start`) of a reserved interval overlapping [start, start + len),
  // or -1.
  double overlap_end(double start, double len) const {
    const double s = fold(start);
    for (const auto& [b, l] : busy_) {
      for (double shift : {-period_, 0.0, period_}) {
        const double bs = b + shift, be = bs + l;
        if (bs < s + len - kEps && s < be - kEps) return start + (be - s);
      }
    }
    return -1.0;
  }
  double period_;
  std::vector<std::pair<double, double>> busy_;  // (folded start, length)
};

struct Placed {
  Action action;  // micro-batch 0
  double start;
};

std::optional<std::vector<Placed>> build_block(int p, const CostModel& c, double period) {
  const int stages = 2 * p;
  const Placement v = Placement::v_shape(p);
  auto rank_of = [&](int s) { return v.rank_of(s); };
  std::vector<Circle> circle(static_cast<size_t>(p), Circle(period));
  std::vector<Placed> block;
  auto place = [&](ActionKind kind, int s, double ready, double cost) -> double {
    const double start = circle[static_cast<size_t>(rank_of(s))].earliest_free(ready, cost);
    if (start < 0) return -1.0;
    circle[static_cast<size_t>(rank_of(s))].reserve(start, cost);
    block.push_back(Placed{Action{kind, s, 0}, start});
    return start + cost;
  };
  auto hop = [&](int from, int to) { return rank_of(from) == rank_of(to) ? 0.0 : c.t_comm; };
  std::vector<double> b_end(static_cast<size_t>(stages));
  double t = 0.0;
  for (int s = 0; s < stages; ++s) {
    if (s > 0) t += hop(s - 1, s);
    t = place(ActionKind::kForward, s, t, c.t_f[static_cast<size_t>(s)]);
    if (t < 0) return std::nullopt;
  }
  for (int s = stages - 1; s >= 0; --s) {
    if (s < stages - 1) t += hop(s + 1, s);
    t = place(ActionKind::kBackwardInput, s, t, c.t_b[static_cast<size_t>(s)]);
    if (t < 0) return std::nullopt;
    b_end[static_cast<size_t>(s)] = t;
  }
  for (int s = stages - 1; s >= 0; --s) {
    if (place(ActionKind::kBackwardWeight, s, b_end[static_cast<size_t>(s)], c.t_w[static_cast<size_t>(s)]) < 0)
      return std::nullopt;
  }
  return block;
}

}  // namespace

std::optional<Schedule> v_building_block_schedule(const char* name, int ranks, int micro_batches,
                                                  const CostModel& costs) {
  const int p = ranks, m = micro_batches;
  double period = 0.0;  // the busiest rank's work per micro-batch
  for (int r = 0; r < p; ++r) {
    double work = 0.0;
    for (int s : {r, 2 * p - 1 - r}) {
      work += costs.t_f[static_cast<size_t>(s)] + costs.t_b[static_cast<size_t>(s)] + costs.t_w[static_cast<size_t>(s)];
    }
    period = std::max(period, work);
  }
  if (period <= 0) return std::nullopt;
  // Unequal costs can leave no gap long enough at the busiest rank's work; a longer interval then.
  std::optional<std::vector<Placed>> block;
  double interval = period;
  for (int k = 0; !block && k <= 8; ++k) {
    interval = period * (1.0 + 0.125 * k);
    block = build_block(p, costs, interval);
  }
  if (!block) return std::nullopt;
  Schedule s = gen::make_schedule(name, m, Placement::v_shape(p));
  std::vector<std::vector<std::pair<double, Action>>> timed(static_cast<size_t>(p));
  for (int i = 0; i < m; ++i) {
    for (const Placed& x : *block) {
      Action a = x.action;
      a.micro_batch = i;
      const int r = s.placement.rank_of(a.stage);
      timed[static_cast<size_t>(r)].emplace_back(x.start + i * interval, a);
    }
  }
  for (int r = 0; r < p; ++r) {
    auto& list = timed[static_cast<size_t>(r)];
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [t, a] : list) s.ranks[static_cast<size_t>(r)].push_back(a);
  }
  gen::add_steps(s);
  return s;
}

}  // namespace pf::sched
