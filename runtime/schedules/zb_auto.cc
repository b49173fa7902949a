#include "runtime/schedules/zb_auto.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>

#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {

namespace {

constexpr double kEps = 1e-9;

// A rank's cap in bytes, with the slack both the builder and the fixed candidates' check use.
double cap_bytes(double limit, double mem_b) {
  const double cap = limit * mem_b;
  return cap + kEps * std::max(1.0, cap);
}

struct Switches {
  bool allow_bubble_before_first_b = false;  // warm-up: stop adding F's once one would end late
  bool prioritize_b = false;                 // steady: a rank 2+ F's ahead may skip an F
  bool greedy_w_in_small_gaps = false;       // fill a gap < T_W even when idling is harmless
};

enum Kind { kF = 0, kB = 1, kW = 2 };

// Builds one order for one set of switches; the times it computes are the simulator's.
class Builder {
 public:
  Builder(int p, int m, const CostModel& c, double limit, Switches sw)
      : p_(p), m_(m), c_(c), sw_(sw), st_(static_cast<size_t>(p)),
        f_end_(static_cast<size_t>(p) * static_cast<size_t>(m), 0.0),
        b_end_(static_cast<size_t>(p) * static_cast<size_t>(m), 0.0) {
    for (int j = 0; j < p; ++j) {
      Stage& s = st_[static_cast<size_t>(j)];
      s.cap = cap_bytes(limit, c.mem_b(j));
      s.order.reserve(static_cast<size_t>(3 * m));
    }
  }

  // Returns false when the cap cannot be met.
  bool build();

  double makespan() const {
    double t = 0.0;
    for (const Stage& s : st_) t = std::max(t, s.end);
    return t;
  }
  double max_span() const {
    double t = 0.0;
    for (int j = 0; j < p_; ++j) t = std::max(t, st_[static_cast<size_t>(j)].end - f_start(j, 0));
    return t;
  }
  Schedule to_schedule() const {
    Schedule s = gen::make_schedule("zb-auto", m_, Placement::one_per_rank(p_));
    for (int j = 0; j < p_; ++j) {
      auto& list = s.ranks[static_cast<size_t>(j)];
      list.reserve(st_[static_cast<size_t>(j)].order.size() + 1);
      list = st_[static_cast<size_t>(j)].order;
      // Like the built-in generators: the stage's STEP right after its last W.
      list.push_back(Action{ActionKind::kStep, j, -1});
    }
    return s;
  }

 private:
  struct Stage {
    int f = 0, b = 0, w = 0;  // how many of each kind are placed
    double end = 0.0;         // when the last placed action ends
    double mem = 0.0;         // activation memory held after the last placed action
    double cap = 0.0;
    double bubble = 0.0;      // idle time since the stage's first action
    std::vector<Action> order;
  };

  double tf(int j) const { return c_.t_f[static_cast<size_t>(j)]; }
  double tb(int j) const { return c_.t_b[static_cast<size_t>(j)]; }
  double tw(int j) const { return c_.t_w[static_cast<size_t>(j)]; }
  double dmem(int j, Kind k) const {
    switch (k) {
      case kF: return c_.mem_b(j);
      case kB: return c_.mem_w(j) - c_.mem_b(j);
      case kW: return -c_.mem_w(j);
    }
    return 0.0;
  }
  double& f_end(int j, int mb) { return f_end_[static_cast<size_t>(j * m_ + mb)]; }
  double& b_end(int j, int mb) { return b_end_[static_cast<size_t>(j * m_ + mb)]; }
  double f_start(int j, int mb) const { return f_end_[static_cast<size_t>(j * m_ + mb)] - tf(j); }
  Stage& S(int j) { return st_[static_cast<size_t>(j)]; }

  double max_bubble() const {
    double b = 0.0;
    for (const Stage& s : st_) b = std::max(b, s.bubble);
    return b;
  }

  void put(int j, Kind k);
  // Runs W's while memory would not admit an action of kind k. False when impossible.
  bool make_room(int j, Kind k);
  // Fills the wait for an input arriving at `arrival` with W's (see the header).
  void fill_gap_with_w(int j, double arrival);

  int p_, m_;
  const CostModel& c_;
  Switches sw_;
  std::vector<Stage> st_;
  std::vector<double> f_end_, b_end_;
};

void Builder::put(int j, Kind k) {
  Stage& s = S(j);
  const int idx = k == kF ? s.f : (k == kB ? s.b : s.w);
  const double cost = k == kF ? tf(j) : (k == kB ? tb(j) : tw(j));
  double end = s.end + cost;
  const double no_wait = end;
  if (k == kF && j > 0) end = std::max(end, f_end(j - 1, idx) + c_.t_comm + cost);
  if (k == kB && j + 1 < p_) end = std::max(end, b_end(j + 1, idx) + c_.t_comm + cost);
  if (k == kB) end = std::max(end, f_end(j, idx) + cost);  // same rank: no latency
  if (s.f > 0) s.bubble += end - no_wait;
  s.end = end;
  s.mem += dmem(j, k);
  PF_INTERNAL_CHECK(s.mem <= s.cap, "zb-auto: memory ", s.mem, " over the cap ", s.cap);
  if (k == kF) {
    f_end(j, idx) = end;
    ++s.f;
    s.order.push_back(Action{ActionKind::kForward, j, idx});
  } else if (k == kB) {
    b_end(j, idx) = end;
    ++s.b;
    s.order.push_back(Action{ActionKind::kBackwardInput, j, idx});
  } else {
    ++s.w;
    s.order.push_back(Action{ActionKind::kBackwardWeight, j, idx});
  }
}

bool Builder::make_room(int j, Kind k) {
  Stage& s = S(j);
  while (s.mem + dmem(j, k) > s.cap) {
    if (s.w >= s.b) return false;
    put(j, kW);
  }
  return true;
}

void Builder::fill_gap_with_w(int j, double arrival) {
  Stage& s = S(j);
  while (s.w < s.b && s.end + tw(j) <= arrival + kEps) put(j, kW);
  if (s.w < s.b && s.end < arrival - kEps) {
    // A gap shorter than T_W. Idling is harmless when it keeps this rank's cumulative bubble
    // within the largest one; otherwise (or when told to be greedy) a W goes in.
    const bool harmless = arrival - s.end <= max_bubble() - s.bubble + kEps;
    if (!harmless || sw_.greedy_w_in_small_gaps) put(j, kW);
  }
}

bool Builder::build() {
  if (m_ == 0) return true;
  // Round 0: the first F everywhere, the warm-up F's, then the first B from the last rank down.
  for (int j = 0; j < p_; ++j) {
    if (!make_room(j, kF)) return false;
    put(j, kF);
  }
  std::vector<int> extra(static_cast<size_t>(p_), 0);
  double b_done = f_end(p_ - 1, 0) + tb(p_ - 1);  // when the last rank's first B would end
  for (int j = p_ - 2; j >= 0; --j) {
    Stage& s = S(j);
    double mem = s.mem, t = s.end;
    int& n = extra[static_cast<size_t>(j)];
    const double arrival = b_done + c_.t_comm;
    while (s.f + n < m_ && mem + dmem(j, kF) <= s.cap) {
      if (sw_.allow_bubble_before_first_b ? t + tf(j) > arrival + kEps : t >= arrival - kEps) break;
      mem += dmem(j, kF);
      t += tf(j);
      ++n;
    }
    b_done = std::max(t, arrival) + tb(j);
  }
  // Each rank strictly fewer warm-up F's than the one before it (unless it runs out of F's).
  for (int j = 1; j < p_; ++j) {
    int& n = extra[static_cast<size_t>(j)];
    while (n > 0 && n >= extra[static_cast<size_t>(j - 1)] && S(j).f + n < m_) --n;
  }
  for (int j = 0; j < p_; ++j)
    for (int k = 0; k < extra[static_cast<size_t>(j)]; ++k) put(j, kF);
  for (int j = p_ - 1; j >= 0; --j) {
    if (!make_room(j, kB)) return false;
    put(j, kB);
  }

  std::vector<int> want_f(static_cast<size_t>(p_), 0);
  for (int i = 1; i < m_; ++i) {
    // Which ranks run an F this round.
    for (int j = 0; j < p_; ++j) {
      int& want = want_f[static_cast<size_t>(j)];
      want = 0;
      Stage& s = S(j);
      if (s.f >= m_) continue;
      want = 1;
      if (!sw_.prioritize_b || j + 1 >= p_ || s.f < S(j + 1).f + 2) continue;
      // Two or more F's ahead of the next rank: is the F worth delaying this rank's next B for?
      const double grad_arrival = S(j + 1).end + tf(j + 1) + tb(j + 1) + c_.t_comm;
      if (s.end >= grad_arrival) {
        want = 0;
        continue;
      }
      double w_cost = 0.0, mem = s.mem + dmem(j, kF);
      for (int wn = 0; mem > s.cap && s.w + wn < s.b; ++wn) {
        w_cost += tw(j);
        mem += dmem(j, kW);
      }
      if (s.end + tf(j) + w_cost <= grad_arrival + kEps) continue;  // fits before the gradient
      if (grad_arrival - s.end <= max_bubble() - s.bubble + kEps) want = 0;  // waiting is harmless
    }
    // A rank runs an F only if the next rank does (keeps it at least one F ahead).
    for (int j = p_ - 2; j >= 0; --j)
      want_f[static_cast<size_t>(j)] =
          std::min(want_f[static_cast<size_t>(j)], want_f[static_cast<size_t>(j + 1)]);
    for (int j = 0; j < p_; ++j) {
      if (!want_f[static_cast<size_t>(j)]) continue;
      if (!make_room(j, kF)) return false;
      if (j > 0) fill_gap_with_w(j, f_end(j - 1, S(j).f) + c_.t_comm);
      put(j, kF);
    }
    for (int j = p_ - 1; j >= 0; --j) {
      PF_INTERNAL_CHECK(S(j).b == i, "zb-auto: rank ", j, " has ", S(j).b, " B's in round ", i);
      PF_INTERNAL_CHECK(S(j).f > i, "zb-auto: rank ", j, " has no F for micro-batch ", i);
      if (!make_room(j, kB)) return false;
      if (j + 1 < p_) fill_gap_with_w(j, b_end(j + 1, i) + c_.t_comm);
      // The first rank gates nobody once its F's are done: clear its W's before the B.
      if (j == 0 && S(0).f == m_)
        while (S(0).w < S(0).b) put(0, kW);
      put(j, kB);
    }
  }
  for (int j = 0; j < p_; ++j)
    while (S(j).w < m_) put(j, kW);
  return true;
}

using gen::BestSchedule;

// How a candidate ranks under the objective: lexicographic, smaller is better.
gen::Score score_of(ZbAutoOptions::Objective objective, double max_span, double makespan) {
  return objective == ZbAutoOptions::Objective::kMaxSpan ? gen::Score{max_span, makespan}
                                                         : gen::Score{makespan, max_span};
}

// The handcrafted split-backward schedules are candidates too, where they fit the cap: the heuristic
// is greedy, and on some costs (a T_comm comparable to T_B; for the makespan objective, T_W above
// T_F) one of them is shorter. Their W's are in micro-batch order, like the heuristic's.
constexpr const char* kFixedCandidates[] = {"zb-h1", "zb-h2"};

bool fits_cap(const SimulationResult& r, const CostModel& c, double limit) {
  for (size_t j = 0; j < r.peak_activation_bytes.size(); ++j)
    if (r.peak_activation_bytes[j] > cap_bytes(limit, c.mem_b(static_cast<int>(j)))) return false;
  return true;
}

void offer_fixed_schedules(int p, int m, const CostModel& c, double limit,
                           ZbAutoOptions::Objective objective, BestSchedule* best) {
  GeneratorOptions o;
  o.ranks = p;
  o.micro_batches = m;
  for (const char* name : kFixedCandidates) {
    Schedule s = generate_schedule(name, o);
    const SimulationResult r = simulate(s, c);
    if (!fits_cap(r, c, limit)) continue;
    best->offer(score_of(objective, r.max_span, r.makespan), [&] { return std::move(s); });
  }
}

// ZbAutoOptions::exact_time_limit_s: the exact solver's hook (optimal_schedule.cc holds the logic).
std::atomic<ZbAutoExactSolver> g_exact_solver{nullptr};

}  // namespace

void set_zb_auto_exact_solver(ZbAutoExactSolver solver) { g_exact_solver.store(solver); }

Schedule generate_zb_auto(int ranks, int micro_batches, const CostModel& costs,
                          double mem_limit_in_mb_units, const ZbAutoOptions& options) {
  check_schedule_size(ranks, ranks, micro_batches, "zb-auto");
  PF_CHECK_ARG(std::isfinite(mem_limit_in_mb_units) && mem_limit_in_mb_units >= 1.0,
               "zb-auto: the memory limit must be >= 1 micro-batch (M_B), got ",
               mem_limit_in_mb_units);
  costs.check(ranks);
  PF_CHECK_ARG(std::isfinite(options.exact_time_limit_s) && options.exact_time_limit_s >= 0.0,
               "zb-auto: exact_time_limit_s must be finite and >= 0, got ", options.exact_time_limit_s);
  for (int j = 0; j < ranks; ++j)
    PF_CHECK_ARG(costs.mem_w(j) <= mem_limit_in_mb_units * costs.mem_b(j), "zb-auto: stage ", j,
                 ": M_W = ", costs.mem_w(j), " exceeds the cap ",
                 mem_limit_in_mb_units * costs.mem_b(j));

  BestSchedule best;
  for (int mask = 0; mask < 8; ++mask) {
    Switches sw;
    sw.allow_bubble_before_first_b = (mask & 1) != 0;
    sw.prioritize_b = (mask & 2) != 0;
    sw.greedy_w_in_small_gaps = (mask & 4) != 0;
    Builder builder(ranks, micro_batches, costs, mem_limit_in_mb_units, sw);
    if (!builder.build()) continue;
    best.offer(score_of(options.objective, builder.max_span(), builder.makespan()),
               [&] { return builder.to_schedule(); });
  }
  offer_fixed_schedules(ranks, micro_batches, costs, mem_limit_in_mb_units, options.objective,
                        &best);
  PF_CHECK_STATE(!best.empty(), "zb-auto: no order of ", micro_batches,
                 " micro-batches on ", ranks, " ranks fits the memory cap of ",
                 mem_limit_in_mb_units, " M_B");
  if (options.exact_time_limit_s > 0.0) {
    const double best_makespan =
        options.objective == ZbAutoOptions::Objective::kMaxSpan ? best.score().second : best.score().first;
    const ZbAutoExactSolver exact = g_exact_solver.load();
    PF_CHECK_STATE(exact != nullptr, "zb-auto: exact_time_limit_s needs the exact solver: link //runtime/schedules:optimal");
    if (auto shorter = exact(ranks, micro_batches, costs, mem_limit_in_mb_units, options.exact_time_limit_s,
                             best_makespan))
      return std::move(*shorter);
  }
  Schedule chosen = best.take();
  chosen.name = "zb-auto";  // also when a fixed candidate (zb-h1, zb-h2) won
  return chosen;
}

void register_zb_auto_generator() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (has_generator("zb-auto")) return;
    ScheduleTraits traits;
    traits.cost_driven = true;
    register_generator(
        "zb-auto",
        [](const GeneratorOptions& o) {
          PF_CHECK_ARG(o.chunks == 1, "zb-auto places one stage per rank: chunks must be 1, got ", o.chunks);
          PF_CHECK_ARG(!o.reverse_backward, "reverse_backward applies to bfs only, not to zb-auto");
          return generate_zb_auto(o.ranks, o.micro_batches, o.costs.expand(o.ranks),
                                  o.mem_limit > 0 ? o.mem_limit : o.ranks);
        },
        traits);
  });
}

namespace {
// The library is built with alwayslink, so this initialiser runs in every binary that links it.
const bool kZbAutoRegistered = (register_zb_auto_generator(), true);
}  // namespace

}  // namespace pf::sched
