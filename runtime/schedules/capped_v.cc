#include "runtime/schedules/capped_v.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/v_building_block.h"

namespace pf::sched {
namespace {

constexpr double kEps = 1e-9;
constexpr double kNever = std::numeric_limits<double>::infinity();

// Rank r's cap: cap_units micro-batches, each the activations of its two chunks (with the
// tolerance every comparison against it uses).
double rank_cap(const CostModel& c, const Placement& v, int r, double cap_units) {
  const std::vector<int> stages = v.stages_of(r);
  const double cap = cap_units * (c.mem_b(stages[0]) + c.mem_b(stages[1]));
  return cap + kEps * std::max(1.0, cap);
}

struct Switches {
  bool forward_first = false;  // a ready F runs before a ready B
  bool w_only_if_fits = false; // a W fills a wait only when it ends before the next input arrives
  // A chunk-0 F keeps room for the chunk-1 F of every micro-batch in its forward on this rank
  // (instead of room for one): earlier micro-batches finish sooner, fewer enter.
  bool reserve_each = false;
};

class Builder {
 public:
  Builder(int p, int m, const CostModel& c, double cap_units, Switches sw)
      : p_(p), m_(m), c_(c), sw_(sw), v_(Placement::v_shape(p)), ranks_(static_cast<size_t>(p)),
        f_end_(static_cast<size_t>(2 * p) * static_cast<size_t>(m), -1.0),
        b_end_(static_cast<size_t>(2 * p) * static_cast<size_t>(m), -1.0) {
    for (int r = 0; r < p; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      k.stage[0] = r;
      k.stage[1] = 2 * p - 1 - r;
      k.cap = rank_cap(c, v_, r, cap_units);
    }
  }

  // False when the ranks cannot go on (every rank waits and no input is on its way).
  bool build() {
    while (true) {
      int r = -1;
      bool any_left = false;
      for (int j = 0; j < p_; ++j) {
        const Rank& k = ranks_[static_cast<size_t>(j)];
        if (done(k)) continue;
        any_left = true;
        if (!k.waiting && (r < 0 || k.time < ranks_[static_cast<size_t>(r)].time)) r = j;
      }
      if (!any_left) return true;
      if (r < 0) return false;  // every rank waits for another
      step(r);
    }
  }

  Schedule to_schedule(const char* name) const {
    Schedule s = gen::make_schedule(name, m_, v_);
    for (int r = 0; r < p_; ++r) s.ranks[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)].order;
    gen::add_steps(s);
    return s;
  }

 private:
  struct Rank {
    int stage[2] = {0, 0};
    int next_f[2] = {0, 0}, next_b[2] = {0, 0};
    double time = 0.0, mem = 0.0, cap = 0.0;
    double reserved = 0.0;  // chunk-1 memory of the micro-batches between their two F's here
    bool waiting = false;  // nothing to do until another rank at the same time acts
    std::deque<std::pair<int, int>> pending_w;  // (chunk, micro-batch), oldest B first
    std::vector<Action> order;
  };

  size_t at(int stage, int mb) const { return static_cast<size_t>(stage) * static_cast<size_t>(m_) + static_cast<size_t>(mb); }
  bool done(const Rank& k) const {
    return k.next_b[0] == m_ && k.next_b[1] == m_ && k.pending_w.empty();
  }

  // When the input of the next F / B of `chunk` on rank r arrives: kNever while its producer has
  // not been placed, nullopt when the rank has no such action left.
  std::optional<double> forward_ready(const Rank& k, int chunk) const {
    const int mb = k.next_f[chunk];
    if (mb >= m_ || (chunk == 1 && mb >= k.next_f[0])) return std::nullopt;
    const int s = k.stage[chunk];
    if (s == 0) return 0.0;
    return arrival(f_end_[at(s - 1, mb)], s - 1, s);
  }
  std::optional<double> backward_ready(const Rank& k, int chunk) const {
    const int mb = k.next_b[chunk];
    if (mb >= m_ || mb >= k.next_f[chunk]) return std::nullopt;
    const int s = k.stage[chunk];
    if (s == 2 * p_ - 1) return f_end_[at(s, mb)];
    return arrival(b_end_[at(s + 1, mb)], s + 1, s);
  }
  double arrival(double end, int from, int to) const {
    if (end < 0) return kNever;
    return end + (v_.rank_of(from) == v_.rank_of(to) ? 0.0 : c_.t_comm);
  }

  void run(Rank& k, ActionKind kind, int chunk, int mb, double start) {
    for (Rank& o : ranks_) o.waiting = false;
    const int s = k.stage[chunk];
    double cost = 0.0;
    if (kind == ActionKind::kForward) {
      cost = c_.t_f[static_cast<size_t>(s)];
      k.mem += c_.mem_b(s);
      k.reserved += chunk == 0 ? c_.mem_b(k.stage[1]) : -c_.mem_b(s);
      f_end_[at(s, mb)] = start + cost;
      ++k.next_f[chunk];
    } else if (kind == ActionKind::kBackwardInput) {
      cost = c_.t_b[static_cast<size_t>(s)];
      k.mem += c_.mem_w(s) - c_.mem_b(s);
      b_end_[at(s, mb)] = start + cost;
      ++k.next_b[chunk];
      k.pending_w.emplace_back(chunk, mb);
    } else {
      cost = c_.t_w[static_cast<size_t>(s)];
      k.mem -= c_.mem_w(s);
      k.pending_w.pop_front();
    }
    k.order.push_back(Action{kind, s, mb});
    k.time = start + cost;
  }

  // Runs one action on rank r, or moves its clock to the next arrival, or marks it waiting.
  void step(int r) {
    Rank& k = ranks_[static_cast<size_t>(r)];
    const double t = k.time;
    const std::optional<double> b0 = backward_ready(k, 0), b1 = backward_ready(k, 1);
    const std::optional<double> f0 = forward_ready(k, 0), f1 = forward_ready(k, 1);
    auto ready = [&](const std::optional<double>& x) { return x && *x <= t + kEps; };
    auto fits = [&](double add) { return k.mem + add <= k.cap; };

    // The B to run: the earlier arrival; chunk 0 on a tie (it completes a micro-batch).
    int b_chunk = -1;
    if (ready(b0) && (!ready(b1) || *b0 <= *b1)) b_chunk = 0;
    else if (ready(b1)) b_chunk = 1;
    if (b_chunk >= 0) {
      const int s = k.stage[b_chunk];
      if (!fits(c_.mem_w(s) - c_.mem_b(s))) return run_w_or_wait(k, t);
    }
    int f_chunk = -1;
    if (ready(f1) && fits(c_.mem_b(k.stage[1]))) f_chunk = 1;
    else if (ready(f0) && fits(c_.mem_b(k.stage[0]) + c_.mem_b(k.stage[1]) +
                               (sw_.reserve_each ? k.reserved : 0.0)))
      f_chunk = 0;
    else if (ready(f1) && !k.pending_w.empty()) return run_w_or_wait(k, t);  // W memory holds it up

    if (b_chunk >= 0 && (f_chunk < 0 || !sw_.forward_first)) {
      return run(k, ActionKind::kBackwardInput, b_chunk, k.next_b[b_chunk], t);
    }
    if (f_chunk >= 0) {
      return run(k, ActionKind::kForward, f_chunk, k.next_f[f_chunk], t);
    }
    // Nothing has arrived: fill the wait with a W, or idle until the next arrival.
    double next = kNever;
    for (const auto& x : {b0, b1, f0, f1}) {
      if (x && *x > t + kEps) next = std::min(next, *x);
    }
    double other = kNever;  // a producer not yet placed ends after its rank's current time
    for (int j = 0; j < p_; ++j) {
      const Rank& o = ranks_[static_cast<size_t>(j)];
      if (j != r && !done(o) && o.time > t + kEps) other = std::min(other, o.time);
    }
    if (!k.pending_w.empty()) {
      const int s = k.stage[k.pending_w.front().first];
      const double w = c_.t_w[static_cast<size_t>(s)];
      if (!sw_.w_only_if_fits || t + w <= std::min(next, other) + kEps || next == kNever) {
        return run_oldest_w(k, t);
      }
    }
    const double until = std::min(next, other);
    if (until == kNever) {
      k.waiting = true;
    } else {
      k.time = until;
    }
  }

  void run_oldest_w(Rank& k, double t) {
    run(k, ActionKind::kBackwardWeight, k.pending_w.front().first, k.pending_w.front().second, t);
  }
  // A B or F that does not fit until W's free memory: the oldest W, or wait (the cap is too small
  // when no rank can go on).
  void run_w_or_wait(Rank& k, double t) {
    if (k.pending_w.empty()) {
      k.waiting = true;
      return;
    }
    run_oldest_w(k, t);
  }

  int p_, m_;
  const CostModel& c_;
  Switches sw_;
  Placement v_;
  std::vector<Rank> ranks_;
  std::vector<double> f_end_, b_end_;
};

// The list-scheduled orders hold the cap by construction; the building block's peak follows from
// its timing, so every candidate is checked against the simulated peaks.
bool within_cap(const SimulationResult& sim, const Schedule& s, const CostModel& c, double cap_units) {
  for (int r = 0; r < s.num_ranks(); ++r) {
    if (sim.peak_activation_bytes[static_cast<size_t>(r)] > rank_cap(c, s.placement, r, cap_units)) return false;
  }
  return true;
}

Schedule registered(const char* name, const GeneratorOptions& o, int cap) {
  gen::require_v_chunks(name, o.chunks);
  gen::require_no_reverse(name, o.reverse_backward);
  return generate_capped_v(name, o.ranks, o.micro_batches, o.costs.expand(2 * o.ranks),
                           o.mem_limit > 0 ? o.mem_limit : cap);
}

const bool kRegistered = [] {
  ScheduleTraits t;
  t.chunks = ChunkRule::kTwo;
  t.cost_driven = true;
  register_generator(
      "v-half", [](const GeneratorOptions& o) { return registered("v-half", o, v_half_cap(o.ranks)); }, t);
  register_generator(
      "v-min", [](const GeneratorOptions& o) { return registered("v-min", o, v_min_cap(o.ranks)); }, t);
  return true;
}();

}  // namespace

int v_half_cap(int ranks) { return (ranks + 2) / 2; }
int v_min_cap(int ranks) { return (ranks + 4) / 3; }

Schedule generate_capped_v(const char* name, int ranks, int micro_batches, const CostModel& costs,
                           double cap_in_micro_batches) {
  PF_CHECK_ARG(ranks >= 1, name, ": ranks must be >= 1, got ", ranks);
  PF_CHECK_ARG(micro_batches >= 1, name, ": micro_batches must be >= 1, got ", micro_batches);
  check_schedule_size(ranks, 2 * static_cast<int64_t>(ranks), micro_batches, name);
  costs.check(2 * ranks);
  PF_CHECK_ARG(cap_in_micro_batches >= 1.0, name,
               ": the memory cap must be at least 1 micro-batch (both chunks of one), got ",
               cap_in_micro_batches);
  std::vector<Schedule> candidates;
  for (int mask = 0; mask < 8; ++mask) {
    Builder builder(ranks, micro_batches, costs, cap_in_micro_batches,
                    Switches{(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0});
    if (builder.build()) candidates.push_back(builder.to_schedule(name));
  }
  if (auto block = v_building_block_schedule(name, ranks, micro_batches, costs)) candidates.push_back(std::move(*block));
  gen::BestSchedule best;  // shortest makespan, then shortest longest span
  for (Schedule& s : candidates) {
    const SimulationResult sim = simulate(s, costs);
    if (within_cap(sim, s, costs, cap_in_micro_batches))
      best.offer({sim.makespan, sim.max_span}, [&] { return std::move(s); });
  }
  PF_CHECK_STATE(!best.empty(), name, ": no order of ", micro_batches, " micro-batches on ", ranks,
                 " ranks fits the memory cap of ", cap_in_micro_batches, " micro-batches");
  return best.take();
}

}  // namespace pf::sched
