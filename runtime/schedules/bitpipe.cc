#include "runtime/schedules/bitpipe.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/stage_actions.h"

namespace pf::sched {
namespace {

constexpr double kUnknown = -1.0;  // an end time not scheduled yet

struct Switches {
  int cap = 1;                 // micro-batches of one pipeline between its first F and first-stage BW
  bool backward_first = true;  // a ready BW before a ready F
  bool deepest_first = true;   // among ready F's: the deepest model stage, else the oldest micro-batch
  bool shallowest_backward = true;  // among ready BW's: the shallowest model stage, else the deepest
};

class Builder {
 public:
  Builder(int p, int m, const CostModel& c, Switches sw)
      : p_(p), c_(c), sw_(sw), s_(gen::make_schedule("bitpipe", m, bitpipe_placement(p))) {
    s_.pipelines = 2;
    const size_t S = static_cast<size_t>(4 * p);
    f_end_.assign(S, std::vector<double>(static_cast<size_t>(m), kUnknown));
    bw_end_ = f_end_;
    next_f_.resize(S);
    next_bw_.resize(S);
    for (int s = 0; s < 4 * p; ++s) next_f_[static_cast<size_t>(s)] = next_bw_[static_cast<size_t>(s)] = s_.first_micro_batch(s);
    free_at_.assign(static_cast<size_t>(p), 0.0);
    in_flight_.assign(static_cast<size_t>(p), 0);
    peak_.assign(static_cast<size_t>(p), 0);
  }

  Schedule build() {
    // An F and a BW per stage and micro-batch of its pipeline.
    const int total = 2 * s_.num_stages() * s_.micro_batches_per_pipeline();
    for (int done = 0; done < total; ++done) {
      Pick best;
      for (int r = 0; r < p_; ++r) {
        const Pick pick = choose(r);
        if (pick.stage >= 0 && (best.stage < 0 || pick.start < best.start)) best = pick;
      }
      PF_INTERNAL_CHECK(best.stage >= 0, "bitpipe: no rank can run anything (cap ", sw_.cap, ")");
      run(best);
    }
    insert_after_last_weight_gradient(s_, ActionKind::kAllReduce);
    for (int r = 0; r < p_; ++r)
      for (int st : s_.placement.stages_of(r)) s_.ranks[static_cast<size_t>(r)].push_back(Action{ActionKind::kStep, st, -1});
    return std::move(s_);
  }

  double makespan() const { return *std::max_element(free_at_.begin(), free_at_.end()); }
  int peak() const { return *std::max_element(peak_.begin(), peak_.end()); }

 private:
  struct Pick {
    int stage = -1;
    bool forward = true;
    double start = 0.0;
  };

  int end_mb(int stage) const { return s_.first_micro_batch(stage) + s_.micro_batches_per_pipeline(); }
  int model_stage(int stage) const { return s_.model_stage(stage); }
  int rank_of(int stage) const { return s_.placement.rank_of(stage); }
  double latency(int from, int to) const { return rank_of(from) != rank_of(to) ? c_.t_comm : 0.0; }

  // When the next F of `stage` may start (kUnknown: its input is not scheduled yet, or the cap).
  double forward_ready(int stage) const {
    const int mb = next_f_[static_cast<size_t>(stage)];
    if (mb >= end_mb(stage)) return kUnknown;
    if (s_.first_in_pipeline(stage)) {
      const int k = mb - s_.first_micro_batch(stage);  // the k-th micro-batch of this pipeline
      if (k < sw_.cap) return 0.0;
      return bw_end_[static_cast<size_t>(stage)][static_cast<size_t>(mb - sw_.cap)];  // the slot frees
    }
    const double in = f_end_[static_cast<size_t>(stage - 1)][static_cast<size_t>(mb)];
    return in < 0 ? kUnknown : in + latency(stage - 1, stage);
  }

  double backward_ready(int stage) const {
    const int mb = next_bw_[static_cast<size_t>(stage)];
    if (mb >= end_mb(stage) || mb >= next_f_[static_cast<size_t>(stage)]) return kUnknown;
    const double f = f_end_[static_cast<size_t>(stage)][static_cast<size_t>(mb)];
    if (s_.last_in_pipeline(stage)) return f;
    const double g = bw_end_[static_cast<size_t>(stage + 1)][static_cast<size_t>(mb)];
    return g < 0 ? kUnknown : std::max(f, g + latency(stage + 1, stage));
  }

  // The action rank r runs next and when, by the switches (stage -1: none can be scheduled yet).
  Pick choose(int r) const {
    const double free = free_at_[static_cast<size_t>(r)];
    std::vector<Pick> cands;
    double earliest = std::numeric_limits<double>::infinity();
    for (int st : s_.placement.stages_of(r)) {
      for (bool fwd : {true, false}) {
        const double ready = fwd ? forward_ready(st) : backward_ready(st);
        if (ready < 0) continue;
        cands.push_back(Pick{st, fwd, std::max(free, ready)});
        earliest = std::min(earliest, std::max(free, ready));
      }
    }
    Pick best;
    for (const Pick& c : cands) {
      if (c.start > earliest) continue;  // not available when the rank next runs
      if (best.stage < 0 || ranks_before(c, best)) best = c;
    }
    return best;
  }

  // Priority among actions available at the same time.
  bool ranks_before(const Pick& a, const Pick& b) const {
    if (a.forward != b.forward) return sw_.backward_first ? !a.forward : a.forward;
    const int mb_a = a.forward ? next_f_[static_cast<size_t>(a.stage)] : next_bw_[static_cast<size_t>(a.stage)];
    const int mb_b = b.forward ? next_f_[static_cast<size_t>(b.stage)] : next_bw_[static_cast<size_t>(b.stage)];
    // Micro-batches counted from their pipeline's first, so the two pipelines alternate.
    const int age_a = mb_a - s_.first_micro_batch(a.stage), age_b = mb_b - s_.first_micro_batch(b.stage);
    if (a.forward && sw_.deepest_first && model_stage(a.stage) != model_stage(b.stage))
      return model_stage(a.stage) > model_stage(b.stage);
    if (!a.forward && model_stage(a.stage) != model_stage(b.stage))
      return (model_stage(a.stage) < model_stage(b.stage)) == sw_.shallowest_backward;
    if (age_a != age_b) return age_a < age_b;
    return a.stage < b.stage;
  }

  // Appends the pick to its rank's list and books its end.
  void run(const Pick& pick) {
    const int st = pick.stage;
    const int r = rank_of(st);
    std::vector<Action>& list = s_.ranks[static_cast<size_t>(r)];
    const size_t s = static_cast<size_t>(st);
    const double dur = pick.forward ? c_.t_f[s] : c_.t_b[s] + c_.t_w[s];
    const double end = pick.start + dur;
    if (pick.forward) {
      const int mb = next_f_[s]++;
      f_end_[s][static_cast<size_t>(mb)] = end;
      list.push_back(gen::F(st, mb));
      if (++in_flight_[static_cast<size_t>(r)] > peak_[static_cast<size_t>(r)]) peak_[static_cast<size_t>(r)] = in_flight_[static_cast<size_t>(r)];
    } else {
      const int mb = next_bw_[s]++;
      bw_end_[s][static_cast<size_t>(mb)] = end;
      list.push_back(gen::BW(st, mb));
      --in_flight_[static_cast<size_t>(r)];
    }
    free_at_[static_cast<size_t>(r)] = end;
  }

  const int p_;
  const CostModel& c_;
  const Switches sw_;
  Schedule s_;  // the placement and pipelines from the start; the lists as they are built
  std::vector<std::vector<double>> f_end_, bw_end_;  // [stage][mb]
  std::vector<int> next_f_, next_bw_;                // [stage]: its next micro-batch
  std::vector<double> free_at_;                      // [rank]
  std::vector<int> in_flight_, peak_;                // [rank]: F's without their BW, and the peak
};

Schedule registered(const GeneratorOptions& o) {
  gen::require_v_chunks("bitpipe", o.chunks);
  gen::require_no_reverse("bitpipe", o.reverse_backward);
  return generate_bitpipe(o.ranks, o.micro_batches, CostModel::uniform(4 * o.ranks));
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
ScheduleTraits two_pipelines() {
  ScheduleTraits t;
  t.pipelines = 2;
  return t;
}

const bool kRegistered = (register_generator("bitpipe", registered, two_pipelines()), true);

}  // namespace

Placement bitpipe_placement(int ranks) {
  PF_CHECK_ARG(ranks >= 1, "bitpipe: ranks must be >= 1, got ", ranks);
  const int p = ranks;
  std::vector<int> map(static_cast<size_t>(4 * p));
  for (int j = 0; j < 2 * p; ++j) {
    const int v = j < p ? j : 2 * p - 1 - j;
    map[static_cast<size_t>(j)] = v;
    map[static_cast<size_t>(2 * p + j)] = p - 1 - v;
  }
  return Placement::custom(p, map);
}

Schedule generate_bitpipe(int ranks, int micro_batches, const CostModel& costs) {
  PF_CHECK_ARG(ranks >= 1, "bitpipe: ranks must be >= 1, got ", ranks);
  PF_CHECK_ARG(micro_batches >= 2 && micro_batches % 2 == 0, "bitpipe: micro_batches must be even (half go down, ",
               "half up), got ", micro_batches);
  check_schedule_size(ranks, 4 * static_cast<int64_t>(ranks), micro_batches, "bitpipe");
  costs.check(4 * ranks);
  gen::BestSchedule best;
  // Every cap up to 16 ranks; beyond, the quarters of p (each build scans every rank per action).
  std::vector<int> caps;
  const int steps = std::min(ranks, 16);
  for (int k = 1; k <= steps; ++k) caps.push_back(std::max(1, ranks * k / steps));
  caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
  for (int cap : caps) {
    for (bool backward_first : {true, false}) {
      for (bool deepest_first : {true, false}) {
        for (bool shallowest_backward : {true, false}) {
          Builder b(ranks, micro_batches, costs, Switches{cap, backward_first, deepest_first, shallowest_backward});
          Schedule s = b.build();
          best.offer(gen::Score{b.makespan(), static_cast<double>(b.peak())}, [&] { return std::move(s); });
        }
      }
    }
  }
  return best.take();
}

}  // namespace pf::sched
