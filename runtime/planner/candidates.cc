#include "runtime/planner/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/planner/stage_partition.h"
#include "runtime/planner/tensor_parallel_profile.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/overlapped_steps.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/local_schedules.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/stage_actions.h"

namespace pf::plan {
namespace {

// Bytes a parameter element takes: value, gradient and the optimizer's state, in f32.
double bytes_per_parameter(const ModelProfile& profile) { return 4.0 * (2 + profile.optimizer_state_floats); }

// Per stage: the most contexts of one micro-batch it holds at once (F +1, B/BW -1 along its rank's list).
std::vector<double> stage_context_peaks(const sched::Schedule& schedule) {
  std::vector<double> live(static_cast<size_t>(schedule.num_stages()), 0), peak(live.size(), 0);
  for (const auto& list : schedule.ranks) {
    for (const sched::Action& a : list) {
      double& l = live[static_cast<size_t>(a.stage)];
      if (a.kind == sched::ActionKind::kForward) l += 1;
      if (a.kind == sched::ActionKind::kBackwardInput || a.kind == sched::ActionKind::kBackward) l -= 1;
      peak[static_cast<size_t>(a.stage)] = std::max(peak[static_cast<size_t>(a.stage)], l);
    }
  }
  return peak;
}

// The device of tensor-parallel member 0 of pipeline rank `rank` of replica `replica`: a
// replica's ranks are neighbours, and each rank's T members (the planner's links between members
// are those of devices 0 and T - 1).
int device_of(int replica, int rank, int ranks, int tensor) { return tensor * (replica * ranks + rank); }

sched::UniformCosts mean_stage_costs(const MicroBatchCosts& costs, int stages) {
  sched::UniformCosts u;
  double f = 0, b = 0, w = 0;
  for (const LayerCosts& l : costs.layers) {
    f += l.forward_s;
    b += l.backward_input_s;
    w += l.backward_weight_s;
  }
  u.t_f = f / stages;
  u.t_b = b / stages;
  u.t_w = w / stages;
  return u;
}

// The calibration's scale of the profiled layer times at `rows` per micro-batch, for ranks that
// compute side by side: as threads, or as one process each (`processes`: the processes' scale
// when it was measured).
double layer_time_scale(const Calibration& c, int64_t rows, bool processes) {
  return (processes && c.process_compute_scale > 0 ? c.process_compute_scale : c.compute_scale) *
         c.relative_scale(rows);
}

std::vector<int> divisors_up_to(int64_t n, int64_t cap) {
  std::vector<int> out;
  for (int64_t d = 1; d <= n && d <= cap; ++d)
    if (n % d == 0) out.push_back(static_cast<int>(d));
  return out;
}

// The same schedule, degrees, chunks and micro-batches (the policy aside).
bool same_run(const Candidate& a, const Candidate& b) {
  return a.schedule == b.schedule && a.tensor_parallel == b.tensor_parallel &&
         a.sequence_parallel == b.sequence_parallel && a.data_parallel == b.data_parallel &&
         a.ranks == b.ranks && a.chunks == b.chunks && a.micro_batches == b.micro_batches;
}

}  // namespace

std::string Candidate::describe() const {
  std::ostringstream s;
  s << schedule << " P=" << ranks << " v=" << chunks << " m=" << micro_batches << " D=" << data_parallel << " "
    << activation_policy << (overlap_steps ? " overlap" : "");
  if (tensor_parallel > 1) s << " T=" << tensor_parallel;
  if (sequence_parallel) s << " SP";
  return s.str();
}

double PlanRequest::limit() const {
  return memory_limit_bytes > 0 ? memory_limit_bytes : static_cast<double>(cluster.device_memory_bytes);
}

std::vector<std::string> plannable_schedules() {
  std::vector<std::string> out = {kSequentialLabel};
  for (const std::string& name : sched::generator_names()) {
    // Asynchronous and local-learning schedules change what is computed; seq1f1b's sliced
    // attention rounds differently. A plan must not change the result.
    const sched::ScheduleTraits traits = sched::schedule_traits(name);
    if (traits.windowed() || traits.slices_sequences) continue;
    out.push_back(name);
  }
  return out;
}

std::vector<int64_t> needed_micro_batch_rows(const PlanRequest& request) {
  std::vector<int64_t> rows;
  const int n = request.cluster.devices();
  for (int d = 1; d <= n; ++d) {
    if (request.batch_rows % d != 0) continue;
    for (int m : divisors_up_to(request.batch_rows / d, request.max_micro_batches)) rows.push_back(request.batch_rows / d / m);
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

Prediction predict(const PlanRequest& request, const Candidate& c) {
  const int T = c.tensor_parallel, D = c.data_parallel, P = c.ranks, m = c.micro_batches;
  PF_CHECK_ARG(T >= 1 && D >= 1 && P >= 1 && m >= 1 && c.chunks >= 1,
               "tensor_parallel, data_parallel, ranks, chunks and micro_batches must be >= 1");
  PF_CHECK_ARG(static_cast<int64_t>(T) * D * P <= request.cluster.devices(), "T x D x P = ",
               static_cast<int64_t>(T) * D * P, " is more than the ", request.cluster.devices(),
               " devices of the cluster");
  PF_CHECK_ARG(request.batch_rows >= 1 && request.batch_rows % (static_cast<int64_t>(D) * m) == 0, "batch_rows ",
               request.batch_rows, " is not a multiple of D x m = ", static_cast<int64_t>(D) * m);
  // T > 1: every member runs its share of each split layer and the all-reduces, one process each
  // on neighbouring devices.
  const Link& member_link = request.cluster.allreduce_link(0, T - 1, true);
  const MicroBatchCosts costs =
      tensor_parallel_costs(request.profile.tensor_parallel, request.profile.at_rows(request.batch_rows / D / m), T,
                            member_link.bandwidth_bytes_per_s, member_link.latency_s, c.sequence_parallel);
  const int L = static_cast<int>(costs.layers.size());
  const double bpp = bytes_per_parameter(request.profile);
  const double upd = request.profile.update_seconds_per_parameter;
  Prediction p;
  p.candidate = c;
  p.micro_batch_rows = costs.rows;
  const double tokens = static_cast<double>(costs.tokens) * m * D;

  if (c.sequential()) {
    PF_CHECK_ARG(D == 1 && P == 1 && c.chunks == 1, "the sequential trainer runs on one device (D = P = v = 1)");
    PF_CHECK_ARG(c.activation_policy == "none", "the sequential trainer has no activation policy");
    const StageCosts all = stage_costs(costs, 0, L);
    p.candidate.layers_per_stage = {L};
    const Calibration& calibration = request.profile.calibration;
    // T > 1: one process per member, each on its own device, as the pipelined processes compute.
    const double scale =
        T == 1 ? calibration.sequential_compute_scale : layer_time_scale(calibration, costs.rows, true);
    const double compute = all.forward_s + all.backward_input_s + all.backward_weight_s;
    p.pipeline_seconds = m * (compute * scale + all.tensor_parallel_forward_s + all.tensor_parallel_backward_s);
    p.update_seconds = static_cast<double>(all.parameters) * upd * scale;
    p.pipeline_seconds += calibration.sequential_step_overhead_s;
    p.activation_bytes = {all.activation_bytes};
    p.memory_bytes = {static_cast<double>(all.parameters) * bpp + all.activation_bytes};
  } else {
    PF_CHECK_ARG(sched::has_generator(c.schedule), "unknown schedule '", c.schedule, "'");
    sched::ScheduleRequest r;
    r.name = c.schedule;
    r.ranks = P;
    r.micro_batches = m;
    r.chunks = c.chunks;
    sched::Schedule schedule = sched::make_schedule(r);
    const int chain = schedule.stages_per_pipeline();
    PF_CHECK_ARG(chain <= L, c.schedule, " with P = ", P, ", v = ", c.chunks, " has ", chain, " stages but the model only ",
                 L, " top-level layers");
    PF_CHECK_ARG(!(D > 1 && schedule.pipelines > 1), "the trainer does not run two pipelines (", c.schedule,
                 ") with data parallelism");
    if (schedule.traits.cost_driven) {
      r.costs = mean_stage_costs(costs, schedule.num_stages());
      schedule = sched::make_schedule(r);
    }
    const int S = schedule.num_stages();
    // The partition: per model stage, the contexts its busiest copy holds.
    std::vector<int> counts = c.layers_per_stage;
    if (counts.empty()) {
      const std::vector<double> peaks = stage_context_peaks(schedule);
      PartitionLimits limits;
      limits.contexts.assign(static_cast<size_t>(chain), 0.0);
      for (int s = 0; s < S; ++s) {
        double& k = limits.contexts[static_cast<size_t>(schedule.model_stage(s))];
        k = std::max(k, peaks[static_cast<size_t>(s)]);
      }
      limits.bytes_per_parameter = bpp;
      limits.stage_limit_bytes = request.limit() * P / S;  // a rank's memory, shared by its stages
      counts = partition_for_plan(costs, chain, limits);
      if (counts.empty()) counts = partition_for_plan(costs, chain, PartitionLimits());
    }
    PF_CHECK_ARG(static_cast<int>(counts.size()) == chain, "layers_per_stage has ", counts.size(), " entries for ",
                 chain, " stages");
    std::vector<int> begin(static_cast<size_t>(chain) + 1, 0);
    for (int j = 0; j < chain; ++j) {
      PF_CHECK_ARG(counts[static_cast<size_t>(j)] >= 1, "layers_per_stage[", j, "] must be >= 1");
      begin[static_cast<size_t>(j) + 1] = begin[static_cast<size_t>(j)] + counts[static_cast<size_t>(j)];
    }
    PF_CHECK_ARG(begin.back() == L, "layers_per_stage adds up to ", begin.back(), ", not the model's ", L, " layers");
    p.candidate.layers_per_stage = counts;

    const Calibration& calibration = request.profile.calibration;
    // D > 1 or T > 1 trains one process per rank: the layer times there, when the calibration
    // measured them; either scale as the calibration found it at this micro-batch size.
    const bool processes = D > 1 || T > 1;
    const double compute_scale = layer_time_scale(calibration, costs.rows, processes);
    std::vector<StageCosts> stage(static_cast<size_t>(S));
    sched::CostModel cm;
    for (int s = 0; s < S; ++s) {
      const int j = schedule.model_stage(s);
      stage[static_cast<size_t>(s)] = stage_costs(costs, begin[static_cast<size_t>(j)], begin[static_cast<size_t>(j) + 1]);
      const StageCosts& sc = stage[static_cast<size_t>(s)];
      cm.t_f.push_back(sc.forward_s * compute_scale + calibration.action_overhead_s);
      cm.t_b.push_back(sc.backward_input_s * compute_scale + calibration.action_overhead_s);
      // T > 1: the members' all-reduces, after F's and B's compute, the rank waiting in them (the
      // trainer does not overlap them).
      cm.t_tp_f.push_back(sc.tensor_parallel_forward_s);
      cm.t_tp_b.push_back(sc.tensor_parallel_backward_s);
      cm.t_w.push_back(sc.backward_weight_s * compute_scale + calibration.action_overhead_s);
      cm.m_b.push_back(sc.activation_bytes);
      cm.m_w.push_back(sc.weight_pending_bytes);
      cm.m_in.push_back(j == 0 ? 0.0 : sc.input_bytes);
    }
    // One latency for every cross-rank activation or gradient: the slowest boundary's, plus the
    // runtime's calibrated hand-off. A hand-off between two stages of one rank costs neither.
    // D > 1 or T > 1 trains one process per rank: their links are the processes' ones.
    for (int s = 0; s < S; ++s) {
      if (schedule.last_in_pipeline(s)) continue;
      const int a = schedule.placement.rank_of(s), b = schedule.placement.rank_of(s + 1);
      if (a == b) continue;
      const Link& link = request.cluster.link(device_of(0, a, P, T), device_of(0, b, P, T), processes);
      cm.t_comm = std::max(cm.t_comm, link.transfer_seconds(stage[static_cast<size_t>(s) + 1].input_bytes) +
                                          calibration.transfer_overhead_s);
    }
    const Link& host = request.cluster.intra_node;  // offload copies: the host link
    cm.transfer_bandwidth = host.bandwidth_bytes_per_s;
    const sched::ActivationPolicy policy = sched::parse_activation_policy(c.activation_policy);
    PF_CHECK_ARG(policy == sched::ActivationPolicy::kNone || policy == sched::ActivationPolicy::kRecompute ||
                     policy == sched::ActivationPolicy::kOffloadHost,
                 "the planner searches the activation policies none, recompute and offload-host, not '",
                 c.activation_policy, "'");
    if (policy != sched::ActivationPolicy::kNone) schedule = sched::apply_activation_policy(schedule, policy, cm);
    if (D > 1) {
      schedule = sched::add_gradient_allreduce(schedule);
      for (int s = 0; s < S; ++s) {
        const int rank = schedule.placement.rank_of(s);
        const Link& link =
            request.cluster.allreduce_link(device_of(0, rank, P, T), device_of(D - 1, rank, P, T), true);
        cm.t_allreduce_stage.push_back(sched::ring_allreduce_time(4.0 * stage[static_cast<size_t>(s)].parameters, D,
                                                                  link.bandwidth_bytes_per_s, link.latency_s));
      }
    } else if (schedule.pipelines > 1) {  // two copies: each stage sends its gradients to its sibling
      for (int s = 0; s < S; ++s) {
        const int a = schedule.placement.rank_of(s), b = schedule.placement.rank_of(schedule.sibling_stage(s));
        const double bytes = 4.0 * stage[static_cast<size_t>(s)].parameters;
        cm.t_allreduce_stage.push_back(a == b ? 0.0 : request.cluster.link(a, b).transfer_seconds(bytes));
      }
    }
    sched::SimulationOptions so;
    so.comm = sched::communication_semantics(schedule);
    const sched::SimulationResult sim = sched::simulate(schedule, cm, so);
    p.pipeline_seconds = sim.makespan + calibration.step_overhead_s;
    p.bubble_rate = sim.bubble_rate;
    // Overlapping steps: what the capability table lets overlap (one replica, unsplit, no policy,
    // one pipeline).
    const bool can_overlap = request.overlap_steps && D == 1 && T == 1 && policy == sched::ActivationPolicy::kNone &&
                             schedule.pipelines == 1 && P > 1;
    p.memory_bytes.assign(static_cast<size_t>(P), 0.0);
    p.activation_bytes = sim.peak_activation_bytes;
    std::vector<double> rank_parameters(static_cast<size_t>(P), 0.0);
    for (int s = 0; s < S; ++s)
      rank_parameters[static_cast<size_t>(schedule.placement.rank_of(s))] +=
          static_cast<double>(stage[static_cast<size_t>(s)].parameters);
    for (int rank = 0; rank < P; ++rank) {
      const double params = rank_parameters[static_cast<size_t>(rank)];
      p.update_seconds = std::max(p.update_seconds, params * upd);
      p.memory_bytes[static_cast<size_t>(rank)] = params * bpp + sim.peak_activation_bytes[static_cast<size_t>(rank)];
    }
    if (can_overlap) {
      // Each rank updates right after its own last gradient (UPDATE costs the slowest rank's
      // update) and goes on with the next step: the steady-state time per step is the step. The
      // ranks' fixed orders can make that longer than the barrier's makespan plus one update (the
      // updates then sit on the critical path one after another): overlap only where it is faster.
      cm.t_step = p.update_seconds;
      const double period = sched::simulate_step_times(schedule, cm, so).overlapped;
      if (period < sim.makespan + p.update_seconds) {
        p.candidate.overlap_steps = true;
        p.pipeline_seconds = period + calibration.step_overhead_s;
        p.bubble_rate = period > 0 ? std::max(0.0, 1.0 - (sim.ideal + cm.t_step) / period) : 0.0;
      }
    }
  }
  p.step_seconds = p.candidate.overlap_steps ? p.pipeline_seconds : p.pipeline_seconds + p.update_seconds;
  p.tokens_per_second = p.step_seconds > 0 ? tokens / p.step_seconds : 0.0;
  p.peak_memory_bytes = *std::max_element(p.memory_bytes.begin(), p.memory_bytes.end());
  p.fits = p.peak_memory_bytes <= request.limit();
  return p;
}

Plan make_plan(const PlanRequest& request) {
  PF_CHECK_ARG(request.batch_rows >= 1, "batch_rows must be >= 1, got ", request.batch_rows);
  PF_CHECK_ARG(request.max_micro_batches >= 1, "max_micro_batches must be >= 1, got ", request.max_micro_batches);
  PF_CHECK_ARG(request.max_chunks >= 1, "max_chunks must be >= 1, got ", request.max_chunks);
  const std::vector<std::string> known = plannable_schedules();
  const std::vector<std::string> schedules = request.schedules.empty() ? known : request.schedules;
  for (const std::string& s : schedules)
    PF_CHECK_ARG(std::find(known.begin(), known.end(), s) != known.end(), "schedules: '", s,
                 "' is not a schedule the planner searches (synchronous ones only)");
  std::vector<std::string> policies = request.policies;
  if (policies.empty()) {
    policies = {"none", "recompute"};
    if (request.cluster.device_kind == "cuda") policies.push_back("offload-host");
  }
  Plan plan;
  const int n = request.cluster.devices();
  Prediction without_policy;  // the last "none" prediction: the policies loop follows it
  auto consider = [&](const Candidate& c) {
    try {
      Prediction p = predict(request, c);
      if (c.activation_policy == "none") {
        without_policy = p;
      } else if (same_run(without_policy.candidate, c) && without_policy.step_seconds == p.step_seconds &&
                 without_policy.memory_bytes == p.memory_bytes) {
        return;  // the policy changed nothing here (no context waits long enough): the same candidate
      }
      (p.fits ? plan.ranked : plan.too_big).push_back(std::move(p));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      if (plan.refused++ == 0) plan.first_refusal = c.describe() + ": " + e.what();
    }
  };
  auto allowed = [](const std::vector<int>& list, int x) {
    return list.empty() || std::find(list.begin(), list.end(), x) != list.end();
  };
  std::vector<int> tensor_degrees = request.tensor_parallel;
  if (tensor_degrees.empty()) {
    tensor_degrees = {1};
    for (int T : request.profile.tensor_parallel.degrees)
      if (T <= request.cluster.devices_per_node) tensor_degrees.push_back(T);
  }
  // Without and, where the profile measured what its members keep, with sequence parallelism.
  auto sequence_options = [&](int T) {
    std::vector<bool> out = {false};
    if (request.sequence_parallel && T > 1 && request.profile.tensor_parallel.member(T, true) != nullptr)
      out.push_back(true);
    return out;
  };
  for (int T : tensor_degrees) {
    for (int D = 1; T * D <= n; ++D) {
      if (request.batch_rows % D != 0 || !allowed(request.data_parallel, D)) continue;
      for (int P = 1; T * D * P <= n; ++P) {
        if (!allowed(request.ranks, P)) continue;
        for (const std::string& name : schedules) {
          const bool sequential = name == kSequentialLabel;
          if (sequential != (D == 1 && P == 1)) continue;
          // On one rank every synchronous schedule runs the same passes: one of them stands for all.
          if (P == 1 && !sequential && name != kOneRankSchedule) continue;
          std::vector<int> chunk_options = {1};
          if (sched::takes_any_chunks(name))
            for (int v = 2; v <= request.max_chunks; v *= 2) chunk_options.push_back(v);
          for (int v : chunk_options) {
            for (int m : divisors_up_to(request.batch_rows / D, request.max_micro_batches)) {
              for (bool sequence_parallel : sequence_options(T)) {
                for (const std::string& policy : policies) {
                  if (sequential && policy != "none") continue;
                  Candidate c;
                  c.tensor_parallel = T;
                  c.sequence_parallel = sequence_parallel;
                  c.data_parallel = D;
                  c.ranks = P;
                  c.chunks = v;
                  c.micro_batches = m;
                  c.schedule = name;
                  c.activation_policy = policy;
                  consider(c);
                }
              }
            }
          }
        }
      }
    }
  }
  PF_CHECK_ARG(!plan.ranked.empty() || !plan.too_big.empty(), "no candidate could be evaluated",
               plan.first_refusal.empty() ? std::string() : " (first refusal: " + plan.first_refusal + ")");
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(), [](const Prediction& a, const Prediction& b) {
    if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  std::stable_sort(plan.too_big.begin(), plan.too_big.end(), [](const Prediction& a, const Prediction& b) {
    return a.peak_memory_bytes < b.peak_memory_bytes;
  });
  return plan;
}

std::vector<size_t> pareto_front(const std::vector<Prediction>& predictions) {
  std::vector<size_t> order(predictions.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (predictions[a].peak_memory_bytes != predictions[b].peak_memory_bytes)
      return predictions[a].peak_memory_bytes < predictions[b].peak_memory_bytes;
    return predictions[a].step_seconds < predictions[b].step_seconds;
  });
  std::vector<size_t> front;
  double best_time = std::numeric_limits<double>::infinity();
  for (size_t i : order) {
    if (predictions[i].step_seconds < best_time) {
      front.push_back(i);
      best_time = predictions[i].step_seconds;
    }
  }
  return front;
}

}  // namespace pf::plan
