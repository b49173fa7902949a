#include "runtime/schedules/simulator.h"

#include "runtime/schedules/dependencies.h"

#include <set>
#include <utility>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/schedules/action_kinds.h"

namespace pf::sched {

double CostModel::mem_b(int stage) const {
  return m_b.empty() ? 1.0 : m_b.at(static_cast<size_t>(stage));
}

double CostModel::mem_w(int stage) const {
  return m_w.empty() ? 0.0 : m_w.at(static_cast<size_t>(stage));
}

double CostModel::mem_in(int stage) const {
  return m_in.empty() ? 0.0 : m_in.at(static_cast<size_t>(stage));
}

double CostModel::tp_f(int stage) const {
  return t_tp_f.empty() ? 0.0 : t_tp_f.at(static_cast<size_t>(stage));
}

double CostModel::tp_b(int stage) const {
  return t_tp_b.empty() ? 0.0 : t_tp_b.at(static_cast<size_t>(stage));
}

void CostModel::check(int num_stages) const {
  auto check_vec = [&](const std::vector<double>& v, const char* name, bool may_be_empty) {
    if (may_be_empty && v.empty()) return;
    PF_CHECK_ARG(static_cast<int>(v.size()) == num_stages, "CostModel: ", name, " has ", v.size(),
                 " entries, the schedule has ", num_stages, " stages");
    for (size_t i = 0; i < v.size(); ++i)
      PF_CHECK_ARG(std::isfinite(v[i]) && v[i] >= 0.0, "CostModel: ", name, "[", i, "] = ", v[i],
                   " (must be finite and >= 0)");
  };
  check_vec(t_f, "t_f", false);
  check_vec(t_b, "t_b", false);
  check_vec(t_w, "t_w", false);
  check_vec(m_b, "m_b", true);
  check_vec(m_in, "m_in", true);
  check_vec(m_w, "m_w", true);
  check_vec(t_allreduce_stage, "t_allreduce_stage", true);
  check_vec(t_head, "t_head", true);
  check_vec(t_tp_f, "t_tp_f", true);
  check_vec(t_tp_b, "t_tp_b", true);
  auto check_scalar = [](double v, const char* name) {
    PF_CHECK_ARG(std::isfinite(v) && v >= 0.0, "CostModel: ", name, " = ", v,
                 " (must be finite and >= 0)");
  };
  check_scalar(t_comm, "t_comm");
  check_scalar(transfer_bandwidth, "transfer_bandwidth");
  check_scalar(t_step, "t_step");
  check_scalar(t_allreduce, "t_allreduce");
}

double ring_allreduce_time(double bytes, int replicas, double bandwidth, double latency) {
  PF_CHECK_ARG(replicas >= 1, "ring_allreduce_time: replicas must be >= 1, got ", replicas);
  PF_CHECK_ARG(bandwidth > 0 && std::isfinite(bandwidth), "ring_allreduce_time: bandwidth must be > 0, got ", bandwidth);
  if (replicas == 1) return 0.0;
  const double d = replicas;
  return 2.0 * (d - 1.0) / d * bytes / bandwidth + 2.0 * (d - 1.0) * latency;
}

CostModel CostModel::uniform(int num_stages, double t_f, double t_b, double t_w, double t_comm,
                             double m_b, double m_w) {
  PF_CHECK_ARG(num_stages > 0, "CostModel::uniform: num_stages must be > 0, got ", num_stages);
  CostModel c;
  const auto n = static_cast<size_t>(num_stages);
  c.t_f.assign(n, t_f);
  c.t_b.assign(n, t_b);
  c.t_w.assign(n, t_w);
  c.t_comm = t_comm;
  c.m_b.assign(n, m_b);
  c.m_w.assign(n, m_w);
  c.check(num_stages);
  return c;
}

namespace {

constexpr int kNone = -1;

struct Loc {
  int rank = kNone;
  int index = kNone;
  bool found() const { return rank != kNone; }
};

// Where every (kind, stage, micro-batch) runs. STEP/ALLREDUCE (micro_batch -1) use slot M.
class LocationIndex {
 public:
  LocationIndex(int num_stages, int num_micro_batches)
      : stages_(num_stages), slots_(num_micro_batches + 1),
        table_(static_cast<size_t>(kNumActionKinds) * static_cast<size_t>(num_stages) *
               static_cast<size_t>(num_micro_batches + 1)) {}

  Loc& at(ActionKind kind, int stage, int mb) {
    const int slot = mb < 0 ? slots_ - 1 : mb;
    return table_[(static_cast<size_t>(kind) * static_cast<size_t>(stages_) +
                   static_cast<size_t>(stage)) * static_cast<size_t>(slots_) +
                  static_cast<size_t>(slot)];
  }
  Loc get(ActionKind kind, int stage, int mb) const {
    if (stage < 0 || stage >= stages_) return {};
    const int slot = mb < 0 ? slots_ - 1 : mb;
    if (slot >= slots_) return {};
    return table_[(static_cast<size_t>(kind) * static_cast<size_t>(stages_) +
                   static_cast<size_t>(stage)) * static_cast<size_t>(slots_) +
                  static_cast<size_t>(slot)];
  }

 private:
  int stages_;
  int slots_;
  std::vector<Loc> table_;
};

struct Dep {
  Action producer;  // what is needed (for messages)
  Loc loc;          // where it runs (found() false: nobody runs it)
  bool required = true;
};

// What an action costs its rank: its compute, and its tensor-parallel collective when the rank
// waits in it. The sums are formed as they would be with the collectives folded into t_f and t_b
// ((t_b + t_tp_b) + t_w for BW), so a CostModel with t_tp_* gives the times of the folded one.
double action_cost(const Action& a, const CostModel& c, bool background_tp_b) {
  const auto s = static_cast<size_t>(a.stage);
  const double tp_b = background_tp_b ? 0.0 : c.tp_b(a.stage);
  switch (action_kind_info(a.kind).cost) {
    case CostTerm::kForward: return c.t_f[s] + c.tp_f(a.stage);
    case CostTerm::kBackwardInput: return c.t_b[s] + tp_b;
    case CostTerm::kBackwardWeight: return c.t_w[s];
    case CostTerm::kBackwardFused: return (c.t_b[s] + tp_b) + c.t_w[s];
    case CostTerm::kTransfer: return c.transfer_bandwidth > 0.0 ? c.mem_b(a.stage) / c.transfer_bandwidth : 0.0;
    case CostTerm::kStep: return c.t_step;
    case CostTerm::kHead: return c.t_head.empty() ? 0.0 : c.t_head[s];
    case CostTerm::kAllReduce: return c.t_allreduce_stage.empty() ? c.t_allreduce : c.t_allreduce_stage[s];
    case CostTerm::kNone: return 0.0;
  }
  return 0.0;
}

// The tensor-parallel collective of an action and where it starts within it: F and RECOMPUTE
// after their compute (t_f), B and BW after B's compute (t_b).
struct Collective {
  double time = 0.0;    // t_tp_f or t_tp_b (0: none)
  double offset = 0.0;  // from the action's start (the compute before it)
  bool backward = false;
};

Collective collective_of(const Action& a, const CostModel& c) {
  const auto s = static_cast<size_t>(a.stage);
  switch (action_kind_info(a.kind).cost) {
    case CostTerm::kForward: return {c.tp_f(a.stage), c.t_f[s], false};
    case CostTerm::kBackwardInput:
    case CostTerm::kBackwardFused: return {c.tp_b(a.stage), c.t_b[s], true};
    default: return {};
  }
}

// Whether `consumer` reads the input gradient `producer` (a B or BW) computes — the gradient's
// consumers on the stage before and the SEND_B that carries it — rather than only waiting for its
// compute (W, STEP, ALLREDUCE, UPDATE, a sliced schedule's backward of the slice before).
bool reads_input_gradient(const Action& consumer, const Action& producer) {
  if (producer.kind != ActionKind::kBackwardInput && producer.kind != ActionKind::kBackward) return false;
  return consumer.kind == ActionKind::kSendB || consumer.stage != producer.stage;
}

}  // namespace

ActivationDelta activation_delta(const Action& a, const CostModel& c, bool recomputed) {
  const ActionKindInfo& info = action_kind_info(a.kind);
  const ActivationEffect& e = recomputed ? info.effect_recomputed : info.effect;
  const int s = a.stage;
  ActivationDelta d;
  d.units = e.live;
  if (e.b) d.bytes += e.b * c.mem_b(s);
  if (e.w) d.bytes += e.w * c.mem_w(s);
  if (e.in) d.bytes += e.in * c.mem_in(s);
  return d;
}

namespace {

class Simulator {
 public:
  Simulator(const Schedule& schedule, const CostModel& costs, const SimulationOptions& options)
      : sched_(schedule), costs_(costs), options_(options), P_(schedule.num_ranks()),
        S_(schedule.num_stages()),
        M_(schedule.num_micro_batches), index_(std::max(1, S_), std::max(0, M_)) {}

  SimulationResult run();

 private:
  void build_index();
  void dependencies(int rank, const Action& a, std::vector<Dep>* deps) const;
  std::string describe(int rank, int index) const;
  [[noreturn]] void deadlock() const;
  // Posted: moves every RECV's zero-length mark from its posting to its data's arrival.
  void place_posted_recvs(std::vector<std::vector<double>>& start);

  const Schedule& sched_;
  const CostModel& costs_;
  SimulationOptions options_;
  int P_, S_, M_;
  LocationIndex index_;
  std::vector<size_t> pos_;                 // next action per rank
  std::vector<std::vector<double>> end_;    // end time per rank and action index
  // B/BW: when the input gradient exists (the end of a background TP collective when later than
  // the action's end); every other action: its end.
  std::vector<std::vector<double>> output_;
  std::vector<std::vector<TimedCollective>> tp_;  // per rank and action index
  std::vector<Loc> waiting_for_;            // what a blocked rank waits for
};

void Simulator::build_index() {
  for (int r = 0; r < P_; ++r) {
    const auto& list = sched_.ranks[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      PF_CHECK_ARG(a.stage >= 0 && a.stage < S_, "simulate: rank ", r, " action ", i, " (",
                   action_to_string(a), ") names stage ", a.stage, "; the schedule has ", S_,
                   " stages");
      const bool whole_stage = a.kind == ActionKind::kStep || a.kind == ActionKind::kAllReduce;
      if (whole_stage) {
        PF_CHECK_ARG(a.micro_batch == -1, "simulate: rank ", r, " action ", i, " (",
                     action_to_string(a), ") must not name a micro-batch");
      } else {
        PF_CHECK_ARG(a.micro_batch >= 0 && a.micro_batch < M_, "simulate: rank ", r, " action ", i,
                     " (", action_to_string(a), ") names micro-batch ", a.micro_batch,
                     "; the schedule has ", M_, " micro-batches");
      }
      Loc& loc = index_.at(a.kind, a.stage, a.micro_batch);
      PF_CHECK_ARG(!loc.found(), "simulate: ", action_to_string(a), " appears twice: rank ",
                   loc.rank, " action ", loc.index, " and rank ", r, " action ", i);
      loc = Loc{r, static_cast<int>(i)};
    }
  }
}

void Simulator::dependencies(int rank, const Action& a, std::vector<Dep>* deps) const {
  deps->clear();
  const auto rank_of = [&](ActionKind kind, int stage, int micro_batch) {
    const Loc l = index_.get(kind, stage, micro_batch);
    return l.found() ? l.rank : -1;
  };
  action_needs(ScheduleShape::of(sched_), rank_of, rank, a, options_.comm, [&](const Action& p) {
    deps->push_back(Dep{p, index_.get(p.kind, p.stage, p.micro_batch), true});
  });
}

std::string Simulator::describe(int rank, int index) const {
  std::ostringstream o;
  o << "rank " << rank << " action " << index << " ("
    << action_to_string(sched_.ranks[static_cast<size_t>(rank)][static_cast<size_t>(index)])
    << ")";
  return o.str();
}

void Simulator::deadlock() const {
  std::ostringstream o;
  o << "simulate: deadlock in schedule '" << sched_.name << "':";
  for (int r = 0; r < P_; ++r) {
    const size_t p = pos_[static_cast<size_t>(r)];
    if (p >= sched_.ranks[static_cast<size_t>(r)].size()) continue;
    const Loc w = waiting_for_[static_cast<size_t>(r)];
    o << " " << describe(r, static_cast<int>(p)) << " waits for ";
    if (w.found()) {
      o << describe(w.rank, w.index) << ";";
    } else {
      o << "(unknown);";
    }
  }
  fail(ErrorCode::kInvalidArgument, o.str());
}

void Simulator::place_posted_recvs(std::vector<std::vector<double>>& start) {
  for (int r = 0; r < P_; ++r) {
    const auto& list = sched_.ranks[static_cast<size_t>(r)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (a.kind != ActionKind::kRecvF && a.kind != ActionKind::kRecvB) continue;
      const Action send = message_partner(a);
      const Loc l = index_.get(send.kind, send.stage, send.micro_batch);
      if (!l.found()) continue;  // no SEND: the consumer waited for the producer instead
      const double arrival = end_[static_cast<size_t>(l.rank)][static_cast<size_t>(l.index)] + costs_.t_comm;
      double& end = end_[static_cast<size_t>(r)][i];
      end = std::max(end, arrival);
      start[static_cast<size_t>(r)][i] = end;
    }
  }
}

SimulationResult Simulator::run() {
  PF_CHECK_ARG(P_ > 0, "simulate: the schedule has no ranks");
  PF_CHECK_ARG(static_cast<int>(sched_.ranks.size()) == P_, "simulate: the schedule has ",
               sched_.ranks.size(), " action lists for ", P_, " ranks");
  PF_CHECK_ARG(S_ > 0, "simulate: the schedule has no stages");
  PF_CHECK_ARG(M_ >= 0, "simulate: negative number of micro-batches");
  PF_CHECK_ARG(sched_.seq_slices >= 1 && (M_ == 0 || M_ % sched_.seq_slices == 0), "simulate: seq_slices ",
               sched_.seq_slices, " must be >= 1 and divide the ", M_, " units (micro-batches x seq_slices)");
  costs_.check(S_);
  PF_CHECK_ARG(!(options_.blocking_recv && options_.comm == CommSemantics::kPosted),
               "simulate: blocking_recv contradicts posted communication (a posted RECV never blocks)");
  build_index();

  pos_.assign(static_cast<size_t>(P_), 0);
  waiting_for_.assign(static_cast<size_t>(P_), Loc{});
  end_.resize(static_cast<size_t>(P_));
  output_.resize(static_cast<size_t>(P_));
  tp_.resize(static_cast<size_t>(P_));
  std::vector<double> clock(static_cast<size_t>(P_), 0.0);
  std::vector<double> reducer_free(static_cast<size_t>(P_), 0.0);  // ALLREDUCE: when the rank's reducer is free
  std::vector<double> copy_free(static_cast<size_t>(P_), 0.0);     // OFFLOAD/RELOAD: when its copy lane is free
  std::vector<double> tp_free(static_cast<size_t>(P_), 0.0);       // TP collectives: when its TP lane is free
  std::vector<std::vector<double>> start(static_cast<size_t>(P_));
  for (int r = 0; r < P_; ++r) {
    const size_t n = sched_.ranks[static_cast<size_t>(r)].size();
    end_[static_cast<size_t>(r)].assign(n, 0.0);
    output_[static_cast<size_t>(r)].assign(n, 0.0);
    tp_[static_cast<size_t>(r)].assign(n, TimedCollective{});
    start[static_cast<size_t>(r)].assign(n, 0.0);
  }

  std::vector<std::vector<int>> waiters(static_cast<size_t>(P_));
  std::deque<int> ready;
  std::vector<char> queued(static_cast<size_t>(P_), 1);
  for (int r = 0; r < P_; ++r) ready.push_back(r);
  std::vector<Dep> deps;

  while (!ready.empty()) {
    const int r = ready.front();
    ready.pop_front();
    queued[static_cast<size_t>(r)] = 0;
    const auto& list = sched_.ranks[static_cast<size_t>(r)];
    size_t& p = pos_[static_cast<size_t>(r)];
    bool advanced = false;
    while (p < list.size()) {
      const Action& a = list[p];
      dependencies(r, a, &deps);
      double t = clock[static_cast<size_t>(r)];
      bool blocked = false;
      for (const Dep& d : deps) {
        if (!d.loc.found()) {
          fail(ErrorCode::kInvalidArgument, "simulate: unsatisfiable dependency: ",
               describe(r, static_cast<int>(p)), " needs ", action_to_string(d.producer),
               ", which no rank runs");
        }
        const size_t pr = static_cast<size_t>(d.loc.rank);
        if (static_cast<size_t>(d.loc.index) >= pos_[pr]) {
          if (d.loc.rank == r) {
            fail(ErrorCode::kInvalidArgument, "simulate: unsatisfiable dependency: ",
                 describe(r, static_cast<int>(p)), " needs ", action_to_string(d.producer),
                 ", which rank ", r, " runs later (action ", d.loc.index, ")");
          }
          waiting_for_[static_cast<size_t>(r)] = d.loc;
          waiters[pr].push_back(r);
          blocked = true;
          break;
        }
        const double latency = d.loc.rank != r ? costs_.t_comm : 0.0;
        const auto& produced = reads_input_gradient(a, d.producer) ? output_[pr] : end_[pr];
        t = std::max(t, produced[static_cast<size_t>(d.loc.index)] + latency);
      }
      if (blocked) break;
      const Collective tp = collective_of(a, costs_);
      const bool background_tp = tp.time > 0.0 && tp.backward && options_.overlap_tensor_parallel_backward;
      double dur = action_cost(a, costs_, background_tp);
      // ALLREDUCE: on the rank's reducer, after its earlier reductions; OFFLOAD and RELOAD: on the
      // rank's copy lane, after its earlier copies. The rank goes on with its list either way.
      const bool reduction = a.kind == ActionKind::kAllReduce;
      const bool copy = is_background_copy(a.kind);
      if (reduction) t = std::max(t, reducer_free[static_cast<size_t>(r)]);
      if (copy) t = std::max(t, copy_free[static_cast<size_t>(r)]);
      TimedCollective& collective = tp_[static_cast<size_t>(r)][p];
      if (tp.time > 0.0) {
        // On the rank's TP lane, after its earlier collectives. A blocking one holds the rank until
        // it ends (its wait for the lane included); a background one only the input gradient.
        double& lane = tp_free[static_cast<size_t>(r)];
        collective.start = std::max(t + tp.offset, lane);
        collective.background = background_tp;
        if (!background_tp) dur += collective.start - (t + tp.offset);  // 0 unless the lane was busy
        collective.end = collective.start + tp.time;
        // A blocking one ends with its action (F, RECOMPUTE, B) or before its W part (BW): the
        // action's end is t + dur as the folded cost gives it, the collective's within rounding.
        if (!background_tp)
          collective.end = a.kind == ActionKind::kBackward ? std::min(collective.end, t + dur) : t + dur;
        lane = collective.end;
      }
      start[static_cast<size_t>(r)][p] = t;
      end_[static_cast<size_t>(r)][p] = t + dur;
      output_[static_cast<size_t>(r)][p] = background_tp ? std::max(t + dur, collective.end) : t + dur;
      const bool posted_recv = !options_.blocking_recv && (a.kind == ActionKind::kRecvF ||
                                                           a.kind == ActionKind::kRecvB);
      if (reduction) reducer_free[static_cast<size_t>(r)] = t + dur;
      else if (copy) copy_free[static_cast<size_t>(r)] = t + dur;
      else if (!posted_recv) clock[static_cast<size_t>(r)] = t + dur;
      ++p;
      advanced = true;
    }
    if (advanced) {
      // Wake the ranks waiting for something this rank has now done.
      auto& w = waiters[static_cast<size_t>(r)];
      size_t keep = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        const int q = w[i];
        const Loc need = waiting_for_[static_cast<size_t>(q)];
        if (need.rank == r && static_cast<size_t>(need.index) < p) {
          waiting_for_[static_cast<size_t>(q)] = Loc{};
          if (!queued[static_cast<size_t>(q)]) {
            queued[static_cast<size_t>(q)] = 1;
            ready.push_back(q);
          }
        } else {
          w[keep++] = q;
        }
      }
      w.resize(keep);
    }
  }
  for (int r = 0; r < P_; ++r)
    if (pos_[static_cast<size_t>(r)] < sched_.ranks[static_cast<size_t>(r)].size()) deadlock();
  if (options_.comm == CommSemantics::kPosted) place_posted_recvs(start);

  // Results.
  SimulationResult res;
  const auto P = static_cast<size_t>(P_);
  res.busy.assign(P, 0.0);
  res.idle.assign(P, 0.0);
  res.first_start.assign(P, 0.0);
  res.finish.assign(P, 0.0);
  res.peak_activations.assign(P, 0);
  res.peak_activation_bytes.assign(P, 0.0);
  res.tensor_parallel.assign(P, 0.0);
  res.tensor_parallel_blocking.assign(P, 0.0);
  res.timeline.ranks.resize(P);
  for (size_t r = 0; r < P; ++r) {
    const auto& list = sched_.ranks[r];
    auto& tl = res.timeline.ranks[r];
    tl.reserve(list.size());
    double ideal = 0.0;
    std::set<std::pair<int, int>> recomputed;  // (stage, mb) with a RECOMPUTE: F keeps only m_in
    for (const Action& a : list)
      if (a.kind == ActionKind::kRecompute) recomputed.insert({a.stage, a.micro_batch});
    int units = 0, peak_units = 0;
    double bytes = 0.0, peak_bytes = 0.0;
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const TimedCollective& collective = tp_[r][i];
      tl.push_back(TimedAction{a, start[r][i], end_[r][i], collective});
      // Reductions, copies and background collectives run in the background: not the rank's
      // compute time; a blocking collective is, its wait for the TP lane not.
      double busy = end_[r][i] - start[r][i];
      const Collective tp = collective_of(a, costs_);
      if (tp.time > 0.0) {
        res.tensor_parallel[r] += tp.time;
        if (!collective.background) {
          res.tensor_parallel_blocking[r] += tp.time;
          busy -= collective.start - (start[r][i] + tp.offset);
        }
      }
      if (a.kind != ActionKind::kAllReduce && !is_background_copy(a.kind)) res.busy[r] += busy;
      const auto s = static_cast<size_t>(a.stage);
      switch (a.kind) {
        case ActionKind::kForward:
        case ActionKind::kBackwardInput:
        case ActionKind::kBackwardWeight:
        case ActionKind::kBackward: ideal += action_cost(a, costs_, options_.overlap_tensor_parallel_backward); break;
        case ActionKind::kHead: ideal += costs_.t_head.empty() ? 0.0 : costs_.t_head[s]; break;
        default: break;
      }
      const ActivationDelta d = activation_delta(a, costs_, recomputed.count({a.stage, a.micro_batch}) > 0);
      units += d.units;
      bytes += d.bytes;
      peak_units = std::max(peak_units, units);
      peak_bytes = std::max(peak_bytes, bytes);
    }
    res.peak_activations[r] = peak_units;
    res.peak_activation_bytes[r] = peak_bytes;
    res.ideal = std::max(res.ideal, ideal);
    if (!list.empty()) {
      // The span starts at the first action that is not a SEND/RECV mark (if any).
      double first = start[r].front(), last = 0.0;
      for (size_t i = 0; i < list.size(); ++i) {
        if (!is_communication(list[i].kind)) {
          first = start[r][i];
          break;
        }
      }
      for (size_t i = 0; i < list.size(); ++i) last = std::max({last, end_[r][i], tp_[r][i].end});
      res.first_start[r] = first;
      res.finish[r] = last;
    }
    res.makespan = std::max(res.makespan, res.finish[r]);
    if (!list.empty()) res.max_span = std::max(res.max_span, res.finish[r] - res.first_start[r]);
  }
  for (size_t r = 0; r < P; ++r) res.idle[r] = res.makespan - res.busy[r];
  res.bubble_rate = res.makespan > 0.0 ? (res.makespan - res.ideal) / res.makespan : 0.0;
  res.span_bubble_rate = res.max_span > 0.0 ? (res.max_span - res.ideal) / res.max_span : 0.0;
  return res;
}

}  // namespace

SimulationResult simulate(const Schedule& schedule, const CostModel& costs,
                          const SimulationOptions& options) {
  Simulator sim(schedule, costs, options);
  return sim.run();
}

}  // namespace pf::sched
