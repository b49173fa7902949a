#include "tools/cli/schedule_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/gpu_model/chakra_trace.h"
#include "runtime/core/output_file.h"
#include "runtime/schedules/overlapped_steps.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/pytorch_format.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/timeline.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/windowed_schedules.h"
#include "tools/cli/cli.h"
#include "tools/cli/cost_options.h"
#include "tools/cli/validators.h"

namespace pf::cli {
namespace {

std::string known_schedules() {
  std::string out;
  for (const auto& name : sched::generator_names()) out += (out.empty() ? "" : ", ") + name;
  if (!sched::has_generator("zb-auto")) out += ", zb-auto";
  return out;
}

void add_shape_options(CLI::App* cmd, ScheduleArgs& a, bool required) {
  auto* stages = cmd->add_option("--stages", a.request.ranks,
                                 "pipeline stages P = ranks (with --chunks V each rank holds V model chunks)")
                     ->check(CLI::Range(1, 4096));
  auto* mbs = cmd->add_option("--microbatches", a.request.micro_batches, "micro-batches per step M")
                  ->check(CLI::Range(1, 1 << 20));
  if (required) {
    stages->required();
    mbs->required();
  }
  cmd->add_option("--chunks", a.request.chunks,
        "model chunks per rank V (default 0: the schedule's own, 2 for interleaved-1f1b, interleaved-zb, "
        "bfs and the V schedules, 1 for the others)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--seq-slices", a.request.seq_slices,
                  "sequence slices per micro-batch S (seq1f1b; the schedule has M x S units, and the costs are "
                  "per unit)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  add_cost_options(cmd, a.request.costs, CostOptions::kTimes);
  cmd->add_option("--t-head", a.request.costs.t_head,
                  "local learning (ppll, local-updates): one HEAD, the auxiliary head's forward, loss and backward")
      ->check(non_negative_number())
      ->capture_default_str();
  cmd->add_option("--mem-limit", a.request.mem_limit,
                  "zb-auto, v-half, v-min: cap on in-flight micro-batches per rank (default: the schedule's own, "
                  "P for zb-auto like 1F1B, (P+2)/2 for v-half, (P+4)/3 for v-min)")
      ->check(non_negative_number());
  cmd->add_flag("--lower", a.lower, "insert SEND/RECV actions for every cross-rank dependency");
}

const std::vector<std::string>& format_names() {
  static const std::vector<std::string> names = {"native", "pytorch"};
  return names;
}

// --schedule-file in --format; a PyTorch CSV's dropped cells (UNSHARD/RESHARD) are noted on stderr.
sched::Schedule read_schedule(const ScheduleArgs& a, const char* command) {
  if (a.format != "pytorch") return sched::read_schedule_file(a.schedule_file);
  sched::PytorchCsv csv = sched::read_pytorch_csv_file(a.schedule_file);
  for (const std::string& d : csv.dropped) std::cerr << "pipeforge " << command << ": note: dropped " << d << "\n";
  return std::move(csv.schedule);
}

sched::Schedule load_schedule(const ScheduleArgs& a, const char* command) {
  if (!a.schedule_file.empty()) {
    sched::Schedule s = read_schedule(a, command);
    PF_CHECK_ARG(a.request.ranks == 0 || a.request.ranks == s.num_ranks(), "--stages ", a.request.ranks,
                 " does not match the ", s.num_ranks(), " ranks of ", a.schedule_file);
    PF_CHECK_ARG(a.request.micro_batches == 0 || a.request.micro_batches * s.seq_slices == s.num_micro_batches,
                 "--microbatches ", a.request.micro_batches, " does not match the ", s.num_micro_batches,
                 s.seq_slices > 1 ? " units (micro-batches x seq_slices " + std::to_string(s.seq_slices) + ")"
                                  : std::string(" micro-batches"),
                 " of ", a.schedule_file);
    sched::validate_or_throw(s, sched::ValidationOptions{sched::parse_comm_semantics(a.comm)});
    return s;
  }
  PF_CHECK_ARG(a.request.ranks >= 1 && a.request.micro_batches >= 1,
               "--stages and --microbatches are required with --schedule");
  return sched::make_schedule(a.request);
}

void write_text_file(const std::string& path, const std::string& text, const std::string& option) {
  write_output_file(path, text, option);
}

}  // namespace

std::string timeline_title(const sched::Schedule& s, int micro_batches, const std::string& what, double bubble_rate) {
  char bubble[32];
  std::snprintf(bubble, sizeof(bubble), "%.3f", bubble_rate);
  const int chunks = s.stages_per_pipeline() / std::max(1, s.num_ranks());  // per rank and pipeline
  return s.name + ": p=" + std::to_string(s.num_ranks()) + ", m=" + std::to_string(micro_batches) +
         (chunks > 1 ? ", v=" + std::to_string(chunks) : "") +
         (s.pipelines > 1 ? ", " + std::to_string(s.pipelines) + " pipelines" : "") + ", " + what + ", bubble rate " +
         bubble;
}

CLI::App* add_schedule_command(CLI::App& app, ScheduleArgs& a) {
  CLI::App* cmd = app.add_subcommand("schedule", "print a generated schedule in the text form or PyTorch's CSV");
  cmd->add_option("--schedule", a.request.name, "schedule name: " + known_schedules())->required();
  add_shape_options(cmd, a, true);
  cmd->add_option("--format", a.format,
                  "native (the text form) or pytorch (PyTorch's pipeline CSV: compute-only, compute+comms with --lower)")
      ->check(CLI::IsMember(format_names()))
      ->capture_default_str();
  return cmd;
}

CLI::App* add_simulate_command(CLI::App& app, ScheduleArgs& a) {
  CLI::App* cmd = app.add_subcommand("simulate", "time a schedule under a cost model");
  auto* name = cmd->add_option("--schedule", a.request.name, "schedule name: " + known_schedules());
  auto* file = cmd->add_option("--schedule-file", a.schedule_file, "a schedule file (see --format)")
                   ->check(CLI::ExistingFile);
  name->excludes(file);
  cmd->add_option("--format", a.format, "--schedule-file's format: native (the text form) or pytorch (PyTorch's pipeline CSV)")
      ->check(CLI::IsMember(format_names()))
      ->capture_default_str();
  cmd->add_option("--comm", a.comm,
                  "SEND/RECV semantics for validation and timing: rendezvous (blocking) or posted (isend/irecv, "
                  "as PyTorch's runtime; docs/SCHEDULES.md)")
      ->check(CLI::IsMember(sched::comm_semantics_names()))
      ->capture_default_str();
  add_cost_options(cmd, a.request.costs, CostOptions::kMemory);
  add_shape_options(cmd, a, false);
  cmd->add_option("--activation-policy", a.activation_policy,
                  "none, recompute, offload-host, offload-file, selective or balance (docs/MEMORY.md)")
      ->check(CLI::IsMember(pf::sched::activation_policy_names()))
      ->capture_default_str();
  cmd->add_option("--activation-budget", a.activation_budget, "selective: activation bytes per rank (--m-b units)")
      ->check(non_negative_number());
  cmd->add_option("--bandwidth", a.transfer_bandwidth, "bytes per time unit of an OFFLOAD/RELOAD copy (0: free)")
      ->check(non_negative_number());
  cmd->add_flag("--json", a.json, "print one JSON object on stdout");
  cmd->add_option("--trace", a.trace_file, "write a Chrome trace (open in https://ui.perfetto.dev)");
  cmd->add_option("--svg", a.svg_file, "write an SVG drawing of the timeline");
  cmd->add_option("--svg-width", a.svg_width, "width of the SVG drawing in pixels")
      ->check(CLI::Range(200.0, 100000.0))
      ->capture_default_str();
  cmd->add_option("--grid-width", a.grid_width, "columns of the ASCII timeline (0: none)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--windows", a.windows,
                  "asynchronous schedules (pipedream, pipedream-2bw, spectrain, pipemare): steps of "
                  "--microbatches each to run back to back, without a flush between them")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--steps", a.steps,
                  "synchronous schedules: steps to run back to back with overlap (train --overlap-steps: a rank "
                  "begins the next step once its own part and update are done); prints the time per step with "
                  "and without overlap")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--chakra", a.chakra,
                  "write Chakra execution traces of the step here, pipeforge.<rank>.et per rank (the cost units "
                  "taken as microseconds; docs/PREDICT.md)");
  cmd->add_option("--message-bytes", a.message_bytes, "--chakra: bytes of one activation or gradient crossing ranks")
      ->check(non_negative_number())
      ->capture_default_str();
  return cmd;
}

namespace {

// simulate --chakra: the schedule as Chakra traces, one per rank (T = D = 1), its costs' units taken
// as microseconds.
int write_simulated_traces(const ScheduleArgs& a, const sched::Schedule& s, const sched::CostModel& costs) {
  PF_CHECK_ARG(!s.traits.windowed() && a.steps == 1 && s.pipelines == 1,
               "--chakra writes one step of a synchronous one-pipeline schedule (not --windows, --steps or two "
               "pipelines)");
  gpu::TraceCosts t;
  for (int stage = 0; stage < s.num_stages(); ++stage) {
    t.forward_s.push_back(costs.t_f[static_cast<size_t>(stage)] * 1e-6);
    t.backward_input_s.push_back(costs.t_b[static_cast<size_t>(stage)] * 1e-6);
    t.backward_weight_s.push_back(costs.t_w[static_cast<size_t>(stage)] * 1e-6);
  }
  t.forward_collective_bytes.assign(static_cast<size_t>(s.num_stages()), 0.0);
  t.backward_collective_bytes.assign(static_cast<size_t>(s.num_stages()), 0.0);
  t.message_bytes = a.message_bytes;
  t.gradient_bytes.assign(static_cast<size_t>(s.num_ranks()), 0.0);
  t.optimizer_s = costs.t_step * 1e-6;
  return gpu::write_chakra_traces(s, gpu::Grid{1, s.num_ranks(), 1}, t, a.chakra, "pipeforge");
}

}  // namespace

int run_schedule(const ScheduleArgs& a) {
  try {
    sched::Schedule s = load_schedule(a, "schedule");
    if (a.lower) s = sched::lower_communication(s);
    std::cout << (a.format == "pytorch" ? sched::schedule_to_pytorch_csv(s, sched::is_lowered(s))
                                        : sched::schedule_to_text(s));
    return kExitOk;
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kNotFound) throw;
    std::cerr << "pipeforge schedule: " << e.what() << "\n";
    return kExitUsage;
  }
}

int run_simulate(const ScheduleArgs& a) {
  if (a.request.name.empty() && a.schedule_file.empty()) {
    std::cerr << "pipeforge simulate: one of --schedule NAME or --schedule-file FILE is required\n";
    return kExitUsage;
  }
  sched::Schedule s;
  try {
    s = load_schedule(a, "simulate");
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kNotFound) throw;
    std::cerr << "pipeforge simulate: " << e.what() << "\n";
    return kExitUsage;
  }
  // Asynchronous and local-learning schedules never flush between steps: show --windows steps in a
  // row (one fill, one drain) and report the steady state.
  const bool windowed = s.traits.windowed();
  const sched::Schedule generated = s;  // windowed: the run of one step, which the steady state needs
  if (windowed && a.activation_policy != "none" && !(a.activation_policy == "recompute" && s.traits.stashes_weights)) {
    std::cerr << "pipeforge simulate: activation policy '" << a.activation_policy
              << "' cannot apply to schedule '" << a.request.name
              << "' (recompute works with pipedream and pipedream-2bw; see docs/SCHEDULES.md)\n";
    return kExitUsage;
  }
  const int m = s.num_micro_batches;
  if (a.steps > 1 && (windowed || a.activation_policy != "none")) {
    std::cerr << "pipeforge simulate: --steps overlaps the steps of a synchronous schedule without an activation "
              << "policy" << (windowed ? "; '" + s.name + "' never flushes: use --windows" : std::string()) << "\n";
    return kExitUsage;
  }
  const sched::Schedule one_step = s;  // --steps: the step whose times are compared
  if (a.steps > 1) {
    try {
      s = sched::overlapped_run(s, a.steps);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      std::cerr << "pipeforge simulate: " << e.what() << "\n";
      return kExitUsage;
    }
  }
  if (windowed) {
    try {
      sched::check_schedule_size(s.num_ranks(), s.num_stages(), static_cast<int64_t>(a.windows) * m, "--windows");
    } catch (const Error& e) {
      std::cerr << "pipeforge simulate: " << e.what() << "\n";
      return kExitUsage;
    }
    s = sched::windowed_run(generated, a.windows);
  }
  if (a.lower) s = sched::lower_communication(s);
  sched::CostModel costs = a.request.costs.expand(s.num_stages());
  costs.transfer_bandwidth = a.transfer_bandwidth;
  sched::SteadyState steady;
  if (windowed) steady = sched::windowed_steady_state(generated, costs);
  std::vector<double> offloaded;
  if (a.activation_policy != "none") {
    try {
      sched::ActivationPlan plan = sched::plan_activation(s, sched::parse_activation_policy(a.activation_policy),
                                                          costs, a.activation_budget);
      s = std::move(plan.schedule);
      offloaded = plan.offloaded_bytes;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      std::cerr << "pipeforge simulate: " << e.what() << "\n";
      return kExitUsage;
    }
  }
  int traces = 0;
  if (!a.chakra.empty()) {
    try {
      traces = write_simulated_traces(a, s, costs);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kInvalidArgument) throw;
      std::cerr << "pipeforge simulate: " << e.what() << "\n";
      return kExitUsage;
    }
  }
  sched::SimulationOptions sim;
  sim.comm = sched::parse_comm_semantics(a.comm);
  const sched::SimulationResult r = sched::simulate(s, costs, sim);
  sched::StepTimes step_times;
  if (a.steps > 1)
    step_times = sched::simulate_step_times(a.lower ? sched::lower_communication(one_step) : one_step, costs, sim);

  if (!a.trace_file.empty()) write_text_file(a.trace_file, sched::to_chrome_trace(r.timeline), "--trace");
  if (!a.svg_file.empty()) {
    sched::SvgOptions svg;
    svg.width = a.svg_width;
    svg.title = timeline_title(s, s.num_micro_batches, "simulated", r.bubble_rate);
    if (a.steps > 1)
      svg.title = s.name + ": p=" + std::to_string(s.num_ranks()) + ", " + std::to_string(a.steps) + " overlapped steps of m=" +
                  std::to_string(m);
    if (windowed)
      svg.title = s.name + ": p=" + std::to_string(s.num_ranks()) + ", " + std::to_string(a.windows) + " steps of m=" +
                  std::to_string(m) + " without a flush";
    write_text_file(a.svg_file, sched::to_svg(r.timeline, svg), "--svg");
  }
  if (a.json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (int i = 0; i < s.num_ranks(); ++i) {
      ranks.push_back({{"rank", i},
                       {"busy", r.busy[i]},
                       {"idle", r.idle[i]},
                       {"first_start", r.first_start[i]},
                       {"finish", r.finish[i]},
                       {"peak_activations", r.peak_activations[i]},
                       {"peak_activation_bytes", r.peak_activation_bytes[i]}});
    }
    nlohmann::json out = {{"schedule", s.name},
                          {"num_ranks", s.num_ranks()},
                          {"num_stages", s.num_stages()},
                          {"pipelines", s.pipelines},
                          {"microbatches", s.num_micro_batches},
                          {"makespan", r.makespan},
                          {"ideal", r.ideal},
                          {"bubble_rate", r.bubble_rate},
                          {"max_span", r.max_span},
                          {"span_bubble_rate", r.span_bubble_rate},
                          {"peak_activations", r.peak_activations},
                          {"peak_activation_bytes", r.peak_activation_bytes},
                          {"activation_policy", a.activation_policy},
                          {"comm", a.comm},
                          {"offloaded_bytes_per_step", offloaded},
                          {"ranks", ranks}};
    if (a.steps > 1) {
      out["microbatches"] = m;
      out["steps"] = a.steps;
      out["step_times"] = {{"barrier", step_times.barrier},
                           {"overlapped", step_times.overlapped},
                           {"span", step_times.span},
                           {"measures", "barrier: one step's makespan; overlapped: the steady-state time per step "
                                        "with overlap; span: one step's longest rank span"}};
    }
    if (windowed) {
      out["asynchronous"] = s.traits.asynchronous();
      out["local_learning"] = s.traits.local_learning();
      out["microbatches"] = m;
      out["windows"] = a.windows;
      out["steady_state_per_micro_batch"] = steady.per_micro_batch;
      out["steady_state_step"] = steady.per_micro_batch * m;
      out["fill_and_drain"] = steady.fill_and_drain;
    }
    if (traces > 0) out["chakra"] = {{"dir", a.chakra}, {"files", traces}};
    std::cout << out.dump() << std::endl;
    return kExitOk;
  }
  std::cout << s.name << ": " << s.num_ranks() << " ranks, " << s.num_stages() << " stages"
            << (s.pipelines > 1 ? " in " + std::to_string(s.pipelines) + " pipelines" : std::string()) << ", "
            << s.num_micro_batches << " micro-batches\n"
            << "makespan " << r.makespan << ", ideal " << r.ideal << ", bubble rate " << r.bubble_rate
            << " (per-rank span, the zero-bubble paper's measure: " << r.span_bubble_rate << ")\n";
  if (a.steps > 1) {
    std::cout << a.steps << " steps of " << m << " micro-batches with overlap (each rank begins the next step once "
              << "its own part and update are done)\n"
              << "time per step: " << step_times.overlapped << " overlapped, " << step_times.barrier
              << " with a barrier (one step's makespan); one step's longest rank span " << step_times.span << "\n";
  }
  if (windowed) {
    std::cout << (s.traits.local_learning() ? "local learning" : "asynchronous") << ": " << a.windows << " steps of " << m
              << " micro-batches run back to back (no flush; "
              << "one fill, one drain at the end of training)\n"
              << "steady state: " << steady.per_micro_batch << " per micro-batch, " << steady.per_micro_batch * m
              << " per step; fill + drain once: " << steady.fill_and_drain << "\n";
  }
  for (int i = 0; i < s.num_ranks(); ++i) {
    std::cout << "rank " << i << ": busy " << r.busy[i] << ", idle " << r.idle[i] << ", peak activations "
              << r.peak_activations[i] << " micro-batches (" << r.peak_activation_bytes[i] << " bytes)\n";
  }
  if (traces > 0) std::cout << "Chakra traces: " << a.chakra << "/pipeforge.<rank>.et, " << traces << " files\n";
  if (a.grid_width > 0) std::cout << "\n" << sched::to_ascii_grid(r.timeline, a.grid_width);
  return kExitOk;
}

}  // namespace pf::cli
