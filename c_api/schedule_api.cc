// pf_schedule_* and pf_simulation_*: the schedule engine (generate, parse, validate, lower,
// simulate, render) for C callers and, through them, the language bindings.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "runtime/core/log.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/pytorch_format.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/timeline.h"
#include "runtime/schedules/validator.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

constexpr size_t kScheduleOptionsV1Size = sizeof(pf_schedule_options);
// 0.2 appended m_in, stage_m_in, transfer_bandwidth to pf_cost_model and offloaded_bytes,
// recomputes to pf_rank_stats; an older caller's struct ends before them.
constexpr size_t kCostModelV1Size = offsetof(pf_cost_model, m_in);
constexpr size_t kSummaryV1Size = sizeof(pf_simulation_summary);
constexpr size_t kRankStatsV1Size = offsetof(pf_rank_stats, offloaded_bytes);
static_assert(kScheduleOptionsV1Size == 56 && kCostModelV1Size == 104 && kSummaryV1Size == 56 &&
                  kRankStatsV1Size == 56,
              "a v1 struct layout changed");

pf_schedule_options default_schedule_options() {
  const pf::sched::UniformCosts d;
  pf_schedule_options o{};
  o.struct_size = sizeof(pf_schedule_options);
  o.chunks = 0;
  o.t_f = d.t_f;
  o.t_b = d.t_b;
  o.t_w = d.t_w;
  o.t_comm = d.t_comm;
  o.mem_limit = 0.0;
  return o;
}

pf_cost_model default_cost_model() {
  const pf::sched::UniformCosts d;
  pf_cost_model c{};
  c.struct_size = sizeof(pf_cost_model);
  c.t_f = d.t_f;
  c.t_b = d.t_b;
  c.t_w = d.t_w;
  c.t_comm = d.t_comm;
  c.m_b = d.m_b;
  c.m_w = d.m_w;
  return c;
}

pf_schedule* wrap(pf::sched::Schedule schedule) {
  auto handle = std::make_unique<pf_schedule>();
  handle->schedule = std::move(schedule);
  return handle.release();
}

// Per-stage array `values` (or the scalar) for num_stages stages.
std::vector<double> per_stage(const double* values, double scalar, size_t given, int num_stages,
                              const char* name) {
  if (values == nullptr) return std::vector<double>(static_cast<size_t>(num_stages), scalar);
  PF_CHECK_ARG(given == static_cast<size_t>(num_stages), "costs->num_stages is ", given,
               " but the schedule has ", num_stages, " stages (costs->", name, " needs one entry per stage)");
  return std::vector<double>(values, values + num_stages);
}

pf::sched::CostModel to_cost_model(const pf_cost_model& c, int num_stages) {
  pf::sched::CostModel m;
  m.t_f = per_stage(c.stage_t_f, c.t_f, c.num_stages, num_stages, "stage_t_f");
  m.t_b = per_stage(c.stage_t_b, c.t_b, c.num_stages, num_stages, "stage_t_b");
  m.t_w = per_stage(c.stage_t_w, c.t_w, c.num_stages, num_stages, "stage_t_w");
  m.m_b = per_stage(c.stage_m_b, c.m_b, c.num_stages, num_stages, "stage_m_b");
  m.m_w = per_stage(c.stage_m_w, c.m_w, c.num_stages, num_stages, "stage_m_w");
  m.m_in = per_stage(c.stage_m_in, c.m_in, c.num_stages, num_stages, "stage_m_in");
  m.t_comm = c.t_comm;
  m.transfer_bandwidth = c.transfer_bandwidth;
  m.check(num_stages);
  return m;
}

// The cost model of a caller's (possibly NULL, possibly older) struct for `schedule`.
pf::sched::CostModel read_costs(const pf_cost_model* costs, const pf::sched::Schedule& schedule) {
  const pf_cost_model c = costs == nullptr ? default_cost_model()
                                           : pf::capi::read_struct(*costs, kCostModelV1Size, "costs",
                                                                   "pf_cost_model", default_cost_model());
  return to_cost_model(c, schedule.num_stages());
}

// Times `schedule` under `costs` (possibly NULL or older) with `options` into a new *out.
void simulate_into(const pf_schedule* schedule, const pf_cost_model* costs,
                   const pf::sched::SimulationOptions& options, pf_simulation** out) {
  const pf::sched::Schedule& s = schedule->schedule;
  const pf::sched::CostModel c = read_costs(costs, s);
  auto handle = std::make_unique<pf_simulation>();
  handle->result = pf::sched::simulate(s, c, options);
  handle->offloaded_bytes = pf::sched::offloaded_bytes_per_rank(s, c);
  handle->recomputes = pf::sched::recomputes_per_rank(s);
  *out = handle.release();
}

// The semantics a caller names ("rendezvous" | "posted"); an unknown name is kInvalidArgument.
pf::sched::CommSemantics read_comm(const char* comm) {
  return pf::sched::parse_comm_semantics(pf::capi::require_string(comm, "comm"));
}

// One warning listing the cells a PyTorch CSV had that PipeForge drops (UNSHARD/RESHARD).
void log_dropped_cells(const std::vector<std::string>& dropped) {
  if (dropped.empty() || !pf::log_enabled(pf::LogLevel::kWarning)) return;
  std::string message = "PyTorch CSV: dropped " + std::to_string(dropped.size()) + " cell(s):";
  for (const std::string& line : dropped) message += "\n  " + line;
  pf::log(pf::LogLevel::kWarning, message);
}

}  // namespace

extern "C" {

void pf_schedule_options_init(pf_schedule_options* options) {
  if (options != nullptr) *options = default_schedule_options();
}

pf_status* pf_schedule_generate(const char* name, const pf_schedule_options* options, pf_schedule** out) {
  return guard(__func__, [&] {
    const std::string schedule_name = pf::capi::require_string(name, "name");
    require(options, "options");
    require(out, "out");
    const pf_schedule_options o = pf::capi::read_struct(*options, kScheduleOptionsV1Size, "options",
                                                        "pf_schedule_options", default_schedule_options());
    pf::sched::ScheduleRequest request;
    request.name = schedule_name;
    request.ranks = o.stages;
    request.micro_batches = o.micro_batches;
    request.chunks = o.chunks;
    request.costs.t_f = o.t_f;
    request.costs.t_b = o.t_b;
    request.costs.t_w = o.t_w;
    request.costs.t_comm = o.t_comm;
    request.mem_limit = o.mem_limit;
    *out = wrap(pf::sched::make_schedule(request));
  });
}

pf_status* pf_schedule_parse(const char* text, pf_schedule** out) {
  return guard(__func__, [&] {
    const std::string body = pf::capi::require_string(text, "text");
    require(out, "out");
    pf::sched::Schedule schedule = pf::sched::parse_schedule(body);
    pf::sched::communication_semantics(schedule);  // valid under rendezvous or posted send/recv
    *out = wrap(std::move(schedule));
  });
}

pf_status* pf_schedule_parse_pytorch_csv(const char* text, pf_schedule** out) {
  return guard(__func__, [&] {
    const std::string body = pf::capi::require_string(text, "text");
    require(out, "out");
    pf::sched::PytorchCsv csv = pf::sched::parse_pytorch_csv(body);
    pf::sched::communication_semantics(csv.schedule);  // valid under rendezvous or posted send/recv
    log_dropped_cells(csv.dropped);
    *out = wrap(std::move(csv.schedule));
  });
}

pf_status* pf_schedule_to_pytorch_csv(pf_schedule* schedule, int32_t with_comms, const char** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    require(out, "out");
    schedule->pytorch_csv = pf::sched::schedule_to_pytorch_csv(schedule->schedule, with_comms != 0);
    *out = schedule->pytorch_csv.c_str();
  });
}

pf_status* pf_schedule_to_text(pf_schedule* schedule, const char** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    require(out, "out");
    schedule->text = pf::sched::schedule_to_text(schedule->schedule);
    *out = schedule->text.c_str();
  });
}

pf_status* pf_schedule_validate(const pf_schedule* schedule) {
  return guard(__func__, [&] { pf::sched::validate_or_throw(require(schedule, "schedule")->schedule); });
}

pf_status* pf_schedule_validate_comm(const pf_schedule* schedule, const char* comm) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    pf::sched::validate_or_throw(schedule->schedule, pf::sched::ValidationOptions{read_comm(comm)});
  });
}

pf_status* pf_schedule_lower(const pf_schedule* schedule, pf_schedule** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    require(out, "out");
    *out = wrap(pf::sched::lower_communication(schedule->schedule));
  });
}

pf_status* pf_schedule_num_ranks(const pf_schedule* schedule, int32_t* out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    *require(out, "out") = schedule->schedule.num_ranks();
  });
}

pf_status* pf_schedule_num_stages(const pf_schedule* schedule, int32_t* out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    *require(out, "out") = schedule->schedule.num_stages();
  });
}

pf_status* pf_schedule_num_micro_batches(const pf_schedule* schedule, int32_t* out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    *require(out, "out") = schedule->schedule.num_micro_batches;
  });
}

void pf_schedule_destroy(pf_schedule* schedule) {
  guard_void(__func__, [&] { delete schedule; });
}

void pf_cost_model_init(pf_cost_model* costs) {
  if (costs != nullptr) *costs = default_cost_model();
}

pf_status* pf_schedule_simulate(const pf_schedule* schedule, const pf_cost_model* costs, pf_simulation** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    require(out, "out");
    simulate_into(schedule, costs, {}, out);
  });
}

pf_status* pf_schedule_simulate_comm(const pf_schedule* schedule, const pf_cost_model* costs, const char* comm,
                                     pf_simulation** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    pf::sched::SimulationOptions options;
    options.comm = read_comm(comm);
    require(out, "out");
    simulate_into(schedule, costs, options, out);
  });
}

pf_status* pf_schedule_apply_activation_policy(const pf_schedule* schedule, const char* policy,
                                               const pf_cost_model* costs, double budget_bytes, pf_schedule** out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    const std::string name = pf::capi::require_string(policy, "policy");
    require(out, "out");
    const pf::sched::ActivationPolicy p = pf::sched::parse_activation_policy(name);
    const pf::sched::CostModel c = read_costs(costs, schedule->schedule);
    pf::sched::Schedule applied = pf::sched::apply_activation_policy(schedule->schedule, p, c, budget_bytes);
    pf::sched::validate_or_throw(applied);
    *out = wrap(std::move(applied));
  });
}

pf_status* pf_schedule_min_activation_budget(const pf_schedule* schedule, const pf_cost_model* costs, double* out) {
  return guard(__func__, [&] {
    require(schedule, "schedule");
    require(out, "out");
    *out = pf::sched::min_activation_budget(schedule->schedule, read_costs(costs, schedule->schedule));
  });
}

pf_status* pf_simulation_get_summary(const pf_simulation* simulation, pf_simulation_summary* out) {
  return guard(__func__, [&] {
    require(simulation, "simulation");
    require(out, "out");
    pf::capi::check_out_struct(*out, kSummaryV1Size, "out", "pf_simulation_summary");
    const pf::sched::SimulationResult& r = simulation->result;
    pf_simulation_summary value{};
    value.makespan = r.makespan;
    value.ideal = r.ideal;
    value.bubble_rate = r.bubble_rate;
    value.num_ranks = static_cast<int32_t>(r.busy.size());
    value.max_span = r.max_span;
    value.span_bubble_rate = r.span_bubble_rate;
    pf::capi::write_struct(out, value);
  });
}

pf_status* pf_simulation_get_rank_stats(const pf_simulation* simulation, int32_t rank, pf_rank_stats* out) {
  return guard(__func__, [&] {
    require(simulation, "simulation");
    require(out, "out");
    pf::capi::check_out_struct(*out, kRankStatsV1Size, "out", "pf_rank_stats");
    const pf::sched::SimulationResult& r = simulation->result;
    const int32_t ranks = static_cast<int32_t>(r.busy.size());
    PF_CHECK_ARG(rank >= 0 && rank < ranks, "rank ", rank, " is outside [0, ", ranks, ")");
    pf_rank_stats value{};
    value.busy = r.busy[rank];
    value.idle = r.idle[rank];
    value.first_start = r.first_start[rank];
    value.finish = r.finish[rank];
    value.peak_activations = r.peak_activations[rank];
    value.peak_activation_bytes = r.peak_activation_bytes[rank];
    value.offloaded_bytes = simulation->offloaded_bytes[rank];
    value.recomputes = simulation->recomputes[rank];
    pf::capi::write_struct(out, value);
  });
}

pf_status* pf_simulation_to_chrome_trace(pf_simulation* simulation, const char** out) {
  return guard(__func__, [&] {
    require(simulation, "simulation");
    require(out, "out");
    simulation->trace = pf::sched::to_chrome_trace(simulation->result.timeline);
    *out = simulation->trace.c_str();
  });
}

pf_status* pf_simulation_to_svg(pf_simulation* simulation, const char** out) {
  return guard(__func__, [&] {
    require(simulation, "simulation");
    require(out, "out");
    simulation->svg = pf::sched::to_svg(simulation->result.timeline);
    *out = simulation->svg.c_str();
  });
}

pf_status* pf_simulation_to_ascii(pf_simulation* simulation, int32_t width, const char** out) {
  return guard(__func__, [&] {
    require(simulation, "simulation");
    require(out, "out");
    PF_CHECK_ARG(width >= 10 && width <= 100000, "width must be in [10, 100000], got ", width);
    simulation->ascii = pf::sched::to_ascii_grid(simulation->result.timeline, width);
    *out = simulation->ascii.c_str();
  });
}

void pf_simulation_destroy(pf_simulation* simulation) {
  guard_void(__func__, [&] { delete simulation; });
}

}  // extern "C"
