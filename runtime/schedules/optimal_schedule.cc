#include "runtime/schedules/optimal_schedule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/milp.h"
#include "runtime/schedules/stage_actions.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/zb_auto.h"

namespace pf::sched {
namespace {

constexpr double kRelTol = 1e-9;

double at(const std::vector<double>& v, int s) { return v[static_cast<size_t>(s)]; }

int64_t order_variables(int64_t ranks, int64_t m) { return ranks * 3 * m * (m - 1) / 2; }

// Why an exact solve of this problem is refused ("" when it is not).
std::string refusal(int ranks, int m, const CostModel& costs, double cap) {
  const auto text = [](const auto&... parts) { return detail::concat(parts...); };
  if (ranks < 1) return text("ranks must be >= 1, got ", ranks);
  if (m < 1) return text("micro_batches must be >= 1, got ", m);
  if (ranks > kMaxOptimalRanks) return text("ranks = ", ranks, " is over the exact solver's limit of ", kMaxOptimalRanks);
  if (order_variables(ranks, m) > kMaxOptimalOrderVariables)
    return text("ranks = ", ranks, ", micro_batches = ", m, " need ", order_variables(ranks, m),
                " order variables (1.5 p m (m-1)), over the exact solver's limit of kMaxOptimalOrderVariables = ",
                kMaxOptimalOrderVariables);
  if (costs.num_stages() != ranks)
    return text("costs must have one stage per rank (", ranks, "), got ", costs.num_stages());
  if (!(std::isfinite(cap) && cap >= 1.0))
    return text("mem_cap_in_mb_units must be >= 1 (one micro-batch's M_B), got ", cap);
  for (int s = 0; s < ranks; ++s) {
    if (!(at(costs.t_f, s) > 0.0 && at(costs.t_b, s) > 0.0 && at(costs.t_w, s) > 0.0))
      return text("costs of stage ", s, ": t_f, t_b and t_w must be > 0, got ", at(costs.t_f, s), ", ",
                  at(costs.t_b, s), ", ", at(costs.t_w, s));
    if (costs.mem_w(s) > cap * costs.mem_b(s))
      return text("stage ", s, ": M_W = ", costs.mem_w(s), " exceeds the cap ", cap * costs.mem_b(s));
  }
  return "";
}

void check_problem(int ranks, int m, const CostModel& costs, double cap) {
  PF_CHECK_ARG(ranks >= 1, "solve_optimal_schedule: ranks must be >= 1, got ", ranks);
  PF_CHECK_ARG(m >= 1, "solve_optimal_schedule: micro_batches must be >= 1, got ", m);
  costs.check(ranks);
  const std::string why = refusal(ranks, m, costs, cap);
  PF_CHECK_ARG(why.empty(), "solve_optimal_schedule: ", why);
}

// ---- Heuristic orders: the incumbent, the big-M and the answer when the search finds nothing better.

struct Candidate {
  Schedule schedule;  // F/B/W split, STEPs as the generators place them
  double makespan = 0.0;
  std::string source;
};

// BW(mb, s) -> B(mb, s), W(mb, s): the same times under the simulator's costs.
Schedule split_backwards(Schedule s) {
  for (auto& list : s.ranks) {
    std::vector<Action> out;
    out.reserve(list.size() + list.size() / 2);
    for (const Action& a : list) {
      if (a.kind != ActionKind::kBackward) {
        out.push_back(a);
        continue;
      }
      out.push_back(Action{ActionKind::kBackwardInput, a.stage, a.micro_batch});
      out.push_back(Action{ActionKind::kBackwardWeight, a.stage, a.micro_batch});
    }
    list = std::move(out);
  }
  return s;
}

bool fifo_per_kind(const Schedule& s) {
  for (const auto& list : s.ranks) {
    int next[3] = {0, 0, 0};
    for (const Action& a : list) {
      const int k = static_cast<int>(a.kind);
      if (k > 2) continue;
      if (a.micro_batch != next[k]++) return false;
    }
  }
  return true;
}

// One micro-batch at a time: F, B, W of micro-batch i on every rank before micro-batch i+1. It holds
// at most max(M_B, M_W), so it fits every cap the solver accepts.
Schedule sequential_order(int ranks, int m) {
  Schedule s = gen::make_schedule("sequential", m, Placement::one_per_rank(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < m; ++i) {
      for (ActionKind k : {ActionKind::kForward, ActionKind::kBackwardInput, ActionKind::kBackwardWeight})
        s.ranks[static_cast<size_t>(r)].push_back(Action{k, r, i});
    }
  }
  insert_after_last_weight_gradient(s, ActionKind::kStep);
  return s;
}

// No zb-auto order fits: kFailedPrecondition from generate_zb_auto, which leaves the others.
std::optional<Schedule> zb_auto_if_it_fits(int ranks, int m, const CostModel& costs, double cap,
                                           ZbAutoOptions::Objective objective) {
  ZbAutoOptions o;
  o.objective = objective;
  try {
    return generate_zb_auto(ranks, m, costs, cap, o);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kFailedPrecondition) throw;
    return std::nullopt;
  }
}

std::optional<Candidate> best_heuristic(int ranks, int m, const CostModel& costs, double cap) {
  std::vector<Schedule> orders = one_stage_per_rank_heuristics(ranks, m, costs, cap);
  if (auto by_makespan = zb_auto_if_it_fits(ranks, m, costs, cap, ZbAutoOptions::Objective::kMakespan))
    orders.push_back(std::move(*by_makespan));
  orders.push_back(sequential_order(ranks, m));
  std::optional<Candidate> best;
  for (Schedule& schedule : orders) {
    Schedule split = split_backwards(std::move(schedule));
    if (!fifo_per_kind(split)) continue;
    const SimulationResult sim = simulate(split, costs);
    if (fits_memory_cap(sim, costs, cap) && (!best || sim.makespan < best->makespan * (1.0 - kRelTol))) {
      const std::string source = split.name;
      best = Candidate{std::move(split), sim.makespan, source};
    }
  }
  return best;
}

// ---- The MILP (see the header for the formulation).

enum Kind { kF = 0, kB = 1, kW = 2 };
enum Pair { kFB = 0, kFW = 1, kBW = 2 };  // (first kind, second kind) of an order binary

class Model {
 public:
  Model(int p, int m) : p_(p), m_(m), tri_(m * (m - 1) / 2) {}

  int makespan() const { return 0; }
  int start(Kind k, int s, int i) const { return 1 + (k * p_ + s) * m_ + i; }
  // [first(i) before second(j)], i > j.
  int order(Pair pair, int s, int i, int j) const {
    return 1 + 3 * p_ * m_ + (pair * p_ + s) * tri_ + i * (i - 1) / 2 + j;
  }
  int columns() const { return 1 + 3 * p_ * m_ + 3 * p_ * tri_; }

 private:
  int p_, m_, tri_;
};

Kind first_kind(Pair pair) { return pair == kBW ? kB : kF; }
Kind second_kind(Pair pair) { return pair == kFB ? kB : kW; }

double duration(const CostModel& c, Kind k, int s) {
  return k == kF ? at(c.t_f, s) : (k == kB ? at(c.t_b, s) : at(c.t_w, s));
}

// Earliest starts (heads) and least times from start to the end (tails) of every action under the
// precedences alone (cross-stage, F -> B -> W, FIFO); any schedule of makespan C starts action a in
// [head(a), C - tail(a)].
struct Windows {
  std::vector<double> head, tail;  // indexed by Model::start(...) - 1
};

Windows windows(const Model& md, int p, int m, const CostModel& c) {
  Windows win;
  win.head.assign(static_cast<size_t>(3 * p * m), 0.0);
  win.tail.assign(static_cast<size_t>(3 * p * m), 0.0);
  const auto H = [&](Kind k, int s, int i) -> double& { return win.head[static_cast<size_t>(md.start(k, s, i) - 1)]; };
  const auto T = [&](Kind k, int s, int i) -> double& { return win.tail[static_cast<size_t>(md.start(k, s, i) - 1)]; };
  const double comm = c.t_comm;
  for (int s = 0; s < p; ++s)
    for (int i = 0; i < m; ++i) {
      double h = s > 0 ? H(kF, s - 1, i) + at(c.t_f, s - 1) + comm : 0.0;
      if (i > 0) h = std::max(h, H(kF, s, i - 1) + at(c.t_f, s));
      H(kF, s, i) = h;
    }
  for (int s = p - 1; s >= 0; --s)
    for (int i = 0; i < m; ++i) {
      double h = H(kF, s, i) + at(c.t_f, s);
      if (s + 1 < p) h = std::max(h, H(kB, s + 1, i) + at(c.t_b, s + 1) + comm);
      if (i > 0) h = std::max(h, H(kB, s, i - 1) + at(c.t_b, s));
      H(kB, s, i) = h;
      H(kW, s, i) = std::max(h + at(c.t_b, s), i > 0 ? H(kW, s, i - 1) + at(c.t_w, s) : 0.0);
    }
  for (int s = 0; s < p; ++s)
    for (int i = m - 1; i >= 0; --i) {
      const double tw = at(c.t_w, s), tb = at(c.t_b, s);
      T(kW, s, i) = tw * (m - i);
      double t = tb + T(kW, s, i);
      if (i + 1 < m) t = std::max(t, tb + T(kB, s, i + 1));
      if (s > 0) t = std::max(t, tb + comm + T(kB, s - 1, i));
      T(kB, s, i) = t;
    }
  for (int s = p - 1; s >= 0; --s)
    for (int i = m - 1; i >= 0; --i) {
      const double tf = at(c.t_f, s);
      double t = tf + T(kB, s, i);
      if (i + 1 < m) t = std::max(t, tf + T(kF, s, i + 1));
      if (s + 1 < p) t = std::max(t, tf + comm + T(kF, s + 1, i));
      T(kF, s, i) = t;
    }
  return win;
}

Milp build_milp(const Model& md, int p, int m, const CostModel& c, double cap_units, double lower_bound,
                double upper_bound) {
  const Windows win = windows(md, p, m, c);
  const auto head = [&](Kind k, int s, int i) { return win.head[static_cast<size_t>(md.start(k, s, i) - 1)]; };
  const auto latest = [&](Kind k, int s, int i) {
    return upper_bound - win.tail[static_cast<size_t>(md.start(k, s, i) - 1)];
  };
  const double slack = kRelTol * upper_bound;
  Milp milp;
  milp.add_column(lower_bound, upper_bound, 1.0, false);
  for (Kind k : {kF, kB, kW})
    for (int s = 0; s < p; ++s)
      for (int i = 0; i < m; ++i) milp.add_column(head(k, s, i), latest(k, s, i) + slack, 0.0, false);
  for (Pair pair : {kFB, kFW, kBW}) {
    const Kind a = first_kind(pair), b = second_kind(pair);
    for (int s = 0; s < p; ++s) {
      const double cap = cap_units * c.mem_b(s) * (1.0 + kRelTol);
      const double held = pair == kFB ? c.mem_b(s) : std::min(c.mem_b(s), c.mem_w(s));
      for (int i = 1; i < m; ++i) {
        for (int j = 0; j < i; ++j) {
          // first(i) before second(j) holds micro-batches j..i at once: impossible over the cap, or
          // when first(i) cannot end before second(j)'s latest start; second(j) first is impossible
          // when it cannot end before first(i)'s latest start.
          const bool never = (pair != kBW && (i - j + 1) * held > cap) ||
                             head(a, s, i) + duration(c, a, s) > latest(b, s, j) + slack;
          const bool always = head(b, s, j) + duration(c, b, s) > latest(a, s, i) + slack;
          milp.add_column(never ? 0.0 : (always ? 1.0 : 0.0), never ? 0.0 : 1.0, 0.0, true);
        }
      }
    }
  }
  PF_INTERNAL_CHECK(static_cast<int>(milp.columns.size()) == md.columns(), "optimal: column layout");

  const double comm = c.t_comm;
  using T = Milp::Term;
  const auto at_least = [&](int later, int earlier, double gap) {
    milp.add_row({T{later, 1.0}, T{earlier, -1.0}}, gap, kMilpInfinity);
  };
  for (int s = 0; s < p; ++s) {
    const double tf = at(c.t_f, s), tb = at(c.t_b, s), tw = at(c.t_w, s);
    for (int i = 0; i < m; ++i) {
      if (s > 0) at_least(md.start(kF, s, i), md.start(kF, s - 1, i), at(c.t_f, s - 1) + comm);
      if (s + 1 < p) at_least(md.start(kB, s, i), md.start(kB, s + 1, i), at(c.t_b, s + 1) + comm);
      at_least(md.start(kB, s, i), md.start(kF, s, i), tf);
      at_least(md.start(kW, s, i), md.start(kB, s, i), tb);
      if (i + 1 < m) {
        for (Kind k : {kF, kB, kW}) at_least(md.start(k, s, i + 1), md.start(k, s, i), duration(c, k, s));
      }
      for (Kind k : {kF, kB, kW})
        at_least(md.makespan(), md.start(k, s, i), win.tail[static_cast<size_t>(md.start(k, s, i) - 1)]);
    }
    at_least(md.makespan(), md.start(kF, s, 0), m * (tf + tb + tw));

    for (Pair pair : {kFB, kFW, kBW}) {
      const Kind a = first_kind(pair), b = second_kind(pair);
      for (int i = 1; i < m; ++i) {
        for (int j = 0; j < i; ++j) {
          const int x = md.order(pair, s, i, j), first = md.start(a, s, i), second = md.start(b, s, j);
          const Milp::Column& col = milp.columns[static_cast<size_t>(x)];
          if (col.lower == col.upper) {  // fixed: the one order it allows is a precedence
            if (col.lower == 1.0) at_least(second, first, duration(c, a, s));
            else at_least(first, second, duration(c, b, s));
            continue;
          }
          // x = 1: second >= first + d_first; x = 0: first >= second + d_second. Each big-M is the
          // most the row can be violated by within the start windows.
          const double m1 = latest(a, s, i) + duration(c, a, s) - head(b, s, j) + slack;
          const double m0 = latest(b, s, j) + duration(c, b, s) - head(a, s, i) + slack;
          milp.add_row({T{second, 1.0}, T{first, -1.0}, T{x, -m1}}, duration(c, a, s) - m1, kMilpInfinity);
          milp.add_row({T{first, 1.0}, T{second, -1.0}, T{x, m0}}, duration(c, b, s), kMilpInfinity);
          // Monotone: first(i) before second(j) implies first(i-1) before second(j) and first(i)
          // before second(j+1) (both forced when the indices meet).
          if (i - 1 > j) milp.add_row({T{x, 1.0}, T{md.order(pair, s, i - 1, j), -1.0}}, -kMilpInfinity, 0.0);
          if (j + 1 < i) milp.add_row({T{x, 1.0}, T{md.order(pair, s, i, j + 1), -1.0}}, -kMilpInfinity, 0.0);
          if (pair != kFW) milp.add_row({T{md.order(kFW, s, i, j), 1.0}, T{x, -1.0}}, 0.0, kMilpInfinity);
        }
      }
    }

    const double mb = c.mem_b(s), mw = c.mem_w(s), cap = cap_units * mb * (1.0 + kRelTol);
    for (int i = 1; i < m; ++i) {  // right after F(s, i)
      std::vector<T> terms;
      for (int j = 0; j < i; ++j) {
        terms.push_back(T{md.order(kFB, s, i, j), mb - mw});
        terms.push_back(T{md.order(kFW, s, i, j), mw});
      }
      milp.add_row(std::move(terms), -kMilpInfinity, cap - mb);
    }
    if (mw > mb) {
      for (int j = 0; j < m; ++j) {  // right after B(s, j)
        std::vector<T> terms;
        for (int i = j + 1; i < m; ++i) terms.push_back(T{md.order(kFB, s, i, j), mb});
        for (int k = 0; k < j; ++k) terms.push_back(T{md.order(kBW, s, j, k), mw});
        milp.add_row(std::move(terms), -kMilpInfinity, cap - mw);
      }
    }
  }
  return milp;
}

Kind kind_of(const Action& a) {
  return a.kind == ActionKind::kForward ? kF : (a.kind == ActionKind::kBackwardInput ? kB : kW);
}

// The MILP point of a FIFO F/B/W schedule: its simulated start times and the order binaries of its
// lists.
std::vector<double> point_of(const Model& md, const Candidate& cand, const CostModel& c, int p, int m) {
  std::vector<double> x(static_cast<size_t>(md.columns()), 0.0);
  x[static_cast<size_t>(md.makespan())] = cand.makespan;
  const SimulationResult sim = simulate(cand.schedule, c);
  for (int s = 0; s < p; ++s) {
    std::vector<std::vector<int>> position(3, std::vector<int>(static_cast<size_t>(m), 0));
    const auto& timed = sim.timeline.ranks[static_cast<size_t>(s)];
    for (size_t n = 0; n < timed.size(); ++n) {
      const Action& a = timed[n].action;
      if (a.kind == ActionKind::kStep) continue;
      x[static_cast<size_t>(md.start(kind_of(a), s, a.micro_batch))] = timed[n].start;
      position[kind_of(a)][static_cast<size_t>(a.micro_batch)] = static_cast<int>(n);
    }
    for (Pair pair : {kFB, kFW, kBW}) {
      for (int i = 1; i < m; ++i) {
        for (int j = 0; j < i; ++j) {
          const bool before = position[first_kind(pair)][static_cast<size_t>(i)] <
                              position[second_kind(pair)][static_cast<size_t>(j)];
          x[static_cast<size_t>(md.order(pair, s, i, j))] = before ? 1.0 : 0.0;
        }
      }
    }
  }
  return x;
}

// Each rank's F/B/W by start time in the solution (durations are > 0, so no two coincide).
Schedule schedule_of(const Model& md, const std::vector<double>& x, int p, int m) {
  Schedule s;
  s.name = "optimal";
  s.num_micro_batches = m;
  s.placement = Placement::one_per_rank(p);
  s.ranks.resize(static_cast<size_t>(p));
  const ActionKind kinds[3] = {ActionKind::kForward, ActionKind::kBackwardInput, ActionKind::kBackwardWeight};
  for (int r = 0; r < p; ++r) {
    std::vector<std::pair<double, Action>> timed;
    for (Kind k : {kF, kB, kW})
      for (int i = 0; i < m; ++i)
        timed.emplace_back(x[static_cast<size_t>(md.start(k, r, i))], Action{kinds[k], r, i});
    std::stable_sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [t, a] : timed) s.ranks[static_cast<size_t>(r)].push_back(a);
  }
  insert_after_last_weight_gradient(s, ActionKind::kStep);
  return s;
}

}  // namespace

bool optimal_solver_available() { return milp_solver_available(); }

std::vector<Schedule> one_stage_per_rank_heuristics(int ranks, int micro_batches, const CostModel& costs,
                                                    double mem_cap_in_mb_units) {
  std::vector<Schedule> out;
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-h2"}) {
    GeneratorOptions o;
    o.ranks = ranks;
    o.micro_batches = micro_batches;
    out.push_back(generate_schedule(name, o));
  }
  if (auto zb = zb_auto_if_it_fits(ranks, micro_batches, costs, mem_cap_in_mb_units, ZbAutoOptions{}.objective))
    out.push_back(std::move(*zb));
  return out;
}

bool fits_memory_cap(const SimulationResult& sim, const CostModel& costs, double mem_cap_in_mb_units) {
  for (size_t r = 0; r < sim.peak_activation_bytes.size(); ++r) {
    const double cap = mem_cap_in_mb_units * costs.mem_b(static_cast<int>(r));
    if (sim.peak_activation_bytes[r] > cap * (1.0 + kRelTol)) return false;
  }
  return true;
}

double makespan_lower_bound(int ranks, int micro_batches, const CostModel& costs) {
  PF_CHECK_ARG(ranks >= 1 && micro_batches >= 1, "makespan_lower_bound: ranks and micro_batches must be >= 1, got ",
               ranks, " and ", micro_batches);
  costs.check(ranks);
  const int m = micro_batches;
  double bound = 0.0, head = 0.0, path = (m - 1) * at(costs.t_f, 0) + at(costs.t_w, 0);
  for (int s = 0; s < ranks; ++s) {
    bound = std::max(bound, head + m * (at(costs.t_f, s) + at(costs.t_b, s) + at(costs.t_w, s)));
    head += at(costs.t_f, s) + costs.t_comm;
    path += at(costs.t_f, s) + at(costs.t_b, s);
  }
  return std::max(bound, path + 2.0 * (ranks - 1) * costs.t_comm);
}

OptimalResult solve_optimal_schedule(int ranks, int micro_batches, const CostModel& costs,
                                     double mem_cap_in_mb_units, const OptimalOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  check_problem(ranks, micro_batches, costs, mem_cap_in_mb_units);
  PF_CHECK_ARG(std::isfinite(options.time_limit_s) && options.time_limit_s > 0.0,
               "solve_optimal_schedule: options.time_limit_s must be finite and > 0, got ", options.time_limit_s);
  if (!optimal_solver_available())
    fail(ErrorCode::kUnimplemented, "solve_optimal_schedule: this build has no MILP solver (GLPK; install "
         "libglpk-dev, e.g. with tools/setup.sh, then `bazel sync --configure`)");
  const int p = ranks, m = micro_batches;
  std::optional<Candidate> incumbent = best_heuristic(p, m, costs, mem_cap_in_mb_units);
  PF_INTERNAL_CHECK(incumbent.has_value(), "optimal: the sequential order does not fit the cap");

  OptimalResult result;
  result.lower_bound = makespan_lower_bound(p, m, costs);
  result.makespan = incumbent->makespan;
  result.source = incumbent->source;
  const double stop_at = result.lower_bound * (1.0 + kRelTol);
  if (result.makespan <= stop_at) {
    result.schedule = std::move(incumbent->schedule);
    result.proven = true;
  } else {
    const Model md(p, m);
    const Milp milp = build_milp(md, p, m, costs, mem_cap_in_mb_units, result.lower_bound, result.makespan);
    MilpOptions mo;
    const double used = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    mo.time_limit_s = std::max(1e-3, options.time_limit_s - used);
    mo.start = point_of(md, *incumbent, costs, p, m);
    mo.stop_at_objective = stop_at;
    result.schedule = std::move(incumbent->schedule);
    const MilpResult solved = solve_milp(milp, mo);
    PF_INTERNAL_CHECK(solved.status != MilpResult::Status::kInfeasible,
                      "optimal: the MILP is infeasible although the ", result.source, " order fits");
    const bool has_point =
        solved.status == MilpResult::Status::kOptimal || solved.status == MilpResult::Status::kFeasible;
    if (has_point && solved.objective < result.makespan * (1.0 - kRelTol)) {
      result.schedule = schedule_of(md, solved.x, p, m);
      result.makespan = solved.objective;
      result.source = "milp";
    }
    result.proven = solved.status == MilpResult::Status::kOptimal;
  }
  result.schedule.name = "optimal";
  if (result.proven) result.lower_bound = result.makespan;
  result.solve_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

// ---- ZbAutoOptions::exact_time_limit_s: a proven optimum replaces zb-auto's order when shorter.

namespace {

std::optional<Schedule> exact_for_zb_auto(int ranks, int micro_batches, const CostModel& costs, double cap,
                                          double time_limit_s, double heuristic_makespan) {
  if (!optimal_solver_available() || !refusal(ranks, micro_batches, costs, cap).empty()) return std::nullopt;
  OptimalOptions o;
  o.time_limit_s = time_limit_s;
  OptimalResult r = solve_optimal_schedule(ranks, micro_batches, costs, cap, o);
  if (!r.proven || r.makespan >= heuristic_makespan * (1.0 - kRelTol)) return std::nullopt;
  r.schedule.name = "zb-auto";
  return std::move(r.schedule);
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
const bool kExactSolverInstalled = (set_zb_auto_exact_solver(exact_for_zb_auto), true);

}  // namespace

}  // namespace pf::sched
