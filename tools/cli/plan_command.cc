#include "tools/cli/plan_command.h"

#include <CLI/CLI.hpp>

#include "tools/cli/launch_line.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/core/median.h"
#include "runtime/gpu_model/cluster_search.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/planner/calibration.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/cluster.h"
#include "runtime/planner/model_profile.h"
#include "runtime/planner/plan_report.h"
#include "runtime/schedules/activation_policy.h"
#include "tools/cli/cli.h"
#include "tools/cli/process_probe.h"
#include "tools/cli/train_config.h"
#include "tools/cli/train_setup.h"
#include "tools/cli/validators.h"

namespace pf::cli {
namespace {

void write_file(const std::string& file, const std::string& text, const std::string& option) {
  write_output_file(file, text, option);
}

void note(const PlanArgs& a, const std::string& line) {
  if (!a.quiet) std::cerr << line << std::endl;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", seconds);
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Trains the sequential trainer, and 1F1B and ZB-V on two ranks, for a few steps to calibrate the
// profile (calibration.h), on the micro-batch size of m = 4 when the batch has it.
plan::Calibration calibration(const PlanArgs& a, const plan::PlanRequest& request) {
  TrainArgs t = a.model;
  const int64_t rows = a.batch_size % 4 == 0 ? a.batch_size / 4 : request.profile.sizes.front().rows;
  t.micro_batches = 1;
  t.batch_size = 4 * rows;
  note(a, "calibrating with " + std::to_string(a.calibration_steps) + " steps of " + std::to_string(4 * rows) +
              " rows (the sequential trainer, then 1f1b and zb-v on 2 ranks)");
  Setup s = make_setup(t);
  return plan::calibrate(request, s.model, s.data->next(), optimizer_config(t), a.calibration_steps);
}

// The processes' layer-time scale (D > 1 trains one process per rank): a short data-parallel run
// under mpirun of the calibration's batch, 2 replicas of 2 micro-batches (a candidate of the plan
// when the batch splits so), three times; the median of all their steps after each run's warm-up
// (a neighbour's burst can take a whole short run, and one run's steps vary by 10%) fitted into
// request->profile.calibration.process_compute_scale. *seconds: the time it took. Returns "" when
// measured, else why not.
std::string calibrate_process_steps(const PlanArgs& a, plan::PlanRequest* request, double* seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  TrainArgs t = a.model;
  const bool quarters = a.batch_size % 4 == 0;
  const int64_t rows = quarters ? a.batch_size / 4 : request->profile.sizes.front().rows;
  t.micro_batches = quarters ? 2 : 1;
  t.batch_size = rows * t.micro_batches;  // per replica
  t.data_parallel = 2;
  t.schedule = "1f1b";
  t.stages = 1;
  t.steps = a.calibration_steps + 1;
  std::vector<double> steps;
  for (int run = 0; run < 3; ++run) {
    const std::string why = measure_process_steps(t, &steps);
    if (!why.empty()) return why;
  }
  const double measured = median(steps);
  plan::PlanRequest r = *request;
  r.batch_rows = 2 * t.batch_size;
  r.memory_limit_bytes = 1e300;
  plan::Candidate c;
  c.schedule = "1f1b";
  c.data_parallel = 2;
  c.micro_batches = t.micro_batches;
  request->profile.calibration.process_compute_scale = plan::fit_process_compute_scale(r, c, measured);
  *seconds = seconds_since(t0);
  char text[96];
  std::snprintf(text, sizeof text, "processes: a D=2 step of %.1f ms, layer time scale %.2f (%.1f s)", measured * 1e3,
                request->profile.calibration.process_compute_scale, *seconds);
  note(a, text);
  return "";
}

// The `train` arguments that run `choice`: the model options of the plan plus its schedule.
TrainArgs train_args_for(const PlanArgs& a, const plan::Prediction& choice) {
  TrainArgs t = a.model;
  const plan::Candidate& c = choice.candidate;
  t.batch_size = a.batch_size / c.data_parallel;
  t.micro_batches = c.micro_batches;
  t.data_parallel = c.data_parallel;
  t.tensor_parallel = c.tensor_parallel;
  t.sequence_parallel = c.sequence_parallel;
  if (!c.sequential()) {
    t.schedule = c.schedule;
    t.stages = c.ranks;
    t.chunks = c.chunks;
    t.layers_per_stage = c.layers_per_stage;
    t.activation_policy = c.activation_policy;
    t.overlap_steps = c.overlap_steps;
  }
  return t;
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "choose data x pipeline degrees, schedule, chunks, micro-batches, partition and memory policy");
  add_model_options(cmd, a.model);
  add_optimizer_options(cmd, a.model);
  cmd->add_option("--seed", a.model.seed, "seed of the initial parameters and of the data")->capture_default_str();
  cmd->add_option("--blas-threads", a.model.blas_threads, "BLAS threads per rank while profiling")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--batch-size", a.batch_size, "rows per step, all data-parallel replicas together")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  auto* cluster = cmd->add_option("--cluster", a.cluster, "cluster description (JSON; docs/PLANNING.md)")
                      ->check(CLI::ExistingFile);
  auto* measure = cmd->add_flag("--measure", a.measure, "describe this machine instead: a device per core, its memory "
                                                         "shared, the link between two threads measured");
  cluster->excludes(measure);
  cmd->add_option("--devices", a.devices, "--measure: the number of devices (default: the cores)")
      ->check(CLI::Range(1, 4096))
      ->needs(measure);
  cmd->add_option("--memory-limit-gib", a.memory_limit_gib, "memory per device (default: the cluster's)")
      ->check(positive_number());
  cmd->add_option("--profile", a.profile, "read the per-layer profile from this file instead of profiling")
      ->check(CLI::ExistingFile);
  cmd->add_option("--save-profile", a.save_profile, "write the per-layer profile to this file");
  cmd->add_option("--schedules", a.schedules, "search only these schedules (default: every synchronous one, and "
                                              "sequential)")
      ->delimiter(',')
      ->transform(trimmed());
  cmd->add_option("--policies", a.policies, "search only these activation policies (none, recompute, offload-host)")
      ->delimiter(',')
      ->transform(trimmed())
      ->check(CLI::IsMember({"none", "recompute", "offload-host"}));
  cmd->add_option("--data-parallel", a.data_parallel, "try only these data-parallel degrees D (default: every D "
                                                     "with D x P <= devices; D > 1 trains under mpirun)")
      ->delimiter(',')
      ->transform(trimmed())
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--ranks", a.ranks, "try only these pipeline degrees P")
      ->delimiter(',')
      ->transform(trimmed())
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--tensor-parallel", a.tensor_parallel,
                  "try only these tensor-parallel degrees T (default: 1 and every T the model splits at within a "
                  "node; T > 1 trains under mpirun)")
      ->delimiter(',')
      ->transform(trimmed())
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--no-sequence-parallel", a.no_sequence_parallel,
                "try T > 1 without sequence parallelism only (by default each T is also tried with it where the "
                "model splits by sequence steps; train --sequence-parallel)");
  cmd->add_option("--max-microbatches", a.max_micro_batches, "the most micro-batches per replica to try")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--no-overlap-steps", a.no_overlap_steps,
                "predict every step ending on every rank together (by default candidates that can overlap their "
                "steps are predicted and run with train --overlap-steps)");
  cmd->add_option("--max-chunks", a.max_chunks, "the most chunks per rank for the looped schedules (1, 2, 4, ...)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--repeats", a.repeats, "profile: runs per measurement (the median counts)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--calibration-steps", a.calibration_steps,
                  "train the sequential trainer, 1f1b and zb-v on 2 ranks this many steps to measure the runtime's "
                  "overheads (0: predict from the layer profile alone; a saved profile keeps its calibration)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--top", a.top, "rows of the ranked table (and candidates in plan.json)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--out", a.out, "write the plan here (for train --plan)")->capture_default_str();
  cmd->add_option("--svg", a.svg, "write the step time vs peak memory chart here")->capture_default_str();
  cmd->add_flag("--json", a.json, "print one JSON object on stdout instead of the table");
  cmd->add_flag("--quiet", a.quiet, "no progress on stderr");
  const std::string gpu = "GPU cluster (a --cluster file with \"gpu\"; docs/PREDICT.md): ";
  cmd->add_option("--precision", a.precision, gpu + "bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}))->capture_default_str();
  cmd->add_option("--attention", a.attention, gpu + "flash or unfused")
      ->check(CLI::IsMember({"flash", "unfused"}))
      ->capture_default_str();
  cmd->add_option("--recompute", a.recompute, gpu + "the recompute modes to search (default: none,selective,full)")
      ->delimiter(',')
      ->transform(trimmed())
      ->check(CLI::IsMember({"none", "selective", "full"}));
  cmd->add_option("--chakra", a.chakra, gpu + "write the choice's Chakra execution traces here (pipeforge.<rank>.et)");
  cmd->add_option("--micro-batch-sizes", a.micro_batch_sizes, gpu + "sequences per micro-batch to search (default: 1,2,4,8)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  return cmd;
}

namespace {

// `plan --cluster FILE` with a GPU cluster: the cluster model's search (no profile, no calibration:
// the GPUs are described, not measured) over a GPT model of --layers, --d-model, --heads, --seq-len
// and --vocab, --batch-size sequences per step.
int run_gpu_plan(const PlanArgs& a, const nlohmann::json& file) {
  gpu::ClusterSearch search;
  search.cluster = gpu::gpu_cluster_from_json(file, a.cluster);
  PF_CHECK_ARG(a.model.model == "gpt" && a.model.model_file.empty(), "--model ",
               a.model.model_file.empty() ? a.model.model : "--model-file",
               ": a GPU cluster is planned for the GPT model only (its cost model counts a GPT block's FLOPs and bytes)");
  PF_CHECK_ARG(a.model.layers > 0, "--layers is needed to plan a GPT model for a GPU cluster");
  search.model = {static_cast<int>(a.model.layers), static_cast<int>(a.model.d_model), static_cast<int>(a.model.heads),
                  static_cast<int>(a.model.vocab > 0 ? a.model.vocab : PlanArgs::kGpuPlanVocab),
                  static_cast<int>(a.model.seq_len)};
  search.global_batch = a.batch_size;
  search.precision = gpu::parse_precision(a.precision, "--precision");
  search.attention = gpu::parse_attention(a.attention, "--attention");
  search.schedules = a.schedules;
  for (const std::string& r : a.recompute) search.recomputes.push_back(gpu::parse_recompute(r, "--recompute"));
  search.micro_batches = a.micro_batch_sizes;
  search.max_chunks = std::max(2, a.max_chunks);
  search.top = static_cast<size_t>(a.top);
  const gpu::ClusterPlan plan = gpu::search_cluster(search);
  char title[200];
  std::snprintf(title, sizeof title, "GPT l=%d h=%d a=%d V=%d s=%d, batch %lld, %d x %s (%d nodes)",
                search.model.layers, search.model.d_model, search.model.heads, search.model.vocab,
                search.model.seq_len, static_cast<long long>(a.batch_size), search.cluster.gpus(),
                search.cluster.system.name.c_str(), search.cluster.nodes);
  if (!a.svg.empty()) write_file(a.svg, gpu::cluster_plan_svg(plan, title), "--svg");
  int traces = 0;
  if (!a.chakra.empty() && !plan.ranked.empty())
    traces = gpu::write_step_traces(plan.ranked.front().first, plan.ranked.front().second, a.chakra, "pipeforge");
  if (a.json) {
    nlohmann::json out = gpu::cluster_plan_to_json(search, plan);
    if (traces > 0) out["chakra"] = {{"dir", a.chakra}, {"files", traces}};
    std::cout << out.dump() << std::endl;
  } else {
    std::cout << title << "\n" << gpu::cluster_plan_table(plan, static_cast<size_t>(a.top));
    if (!a.svg.empty()) std::cout << "chart: " << a.svg << "\n";
    if (traces > 0) std::cout << "Chakra traces of the choice: " << a.chakra << "/pipeforge.<rank>.et, " << traces << " files\n";
    std::cout << "(a plan for GPUs is a prediction: `train --plan` does not run tensor parallelism yet)\n";
  }
  if (plan.ranked.empty()) {
    std::fflush(stdout);
    std::cerr << "pipeforge plan: no configuration fits in " << search.cluster.system.usable_memory_bytes() / (1024.0 * 1024.0)
              << " MiB per GPU (" << a.cluster << ")\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int run_plan(const PlanArgs& a) {
  try {
    PF_CHECK_ARG(a.measure || !a.cluster.empty(), "--cluster FILE or --measure is needed: the planner plans for "
                                                    "machines it knows");
    if (!a.cluster.empty()) {
      const nlohmann::json file = read_json_file(a.cluster, "--cluster");
      if (gpu::is_gpu_cluster(file)) return run_gpu_plan(a, file);
    PF_CHECK_ARG(a.chakra.empty(), "--chakra applies to a GPU cluster file (docs/PREDICT.md)");
    }
    cpu::set_blas_threads_for_this_thread(a.model.blas_threads);
    plan::PlanRequest request;
    // How the processes' links were obtained (D > 1 trains one process per rank under mpirun).
    std::string process_links;
    bool process_links_measured = false;
    if (a.measure) {
      note(a, "measuring this machine");
      request.cluster = plan::measure_this_machine(a.devices);
    } else {
      request.cluster = plan::cluster_from_json(read_json_file(a.cluster, "--cluster"), a.cluster);
      process_links = request.cluster.has_process_links
                          ? "from " + a.cluster
                          : "not given in " + a.cluster + ": candidates with D > 1 use intra_node";
    }
    request.batch_rows = a.batch_size;
    request.schedules = a.schedules;
    request.policies = a.policies;
    request.data_parallel = a.data_parallel;
    request.ranks = a.ranks;
    request.tensor_parallel = a.tensor_parallel;
    request.max_micro_batches = a.max_micro_batches;
    request.max_chunks = a.max_chunks;
    request.overlap_steps = !a.no_overlap_steps;
    request.sequence_parallel = !a.no_sequence_parallel;
    request.memory_limit_bytes = a.memory_limit_gib * 1024.0 * 1024.0 * 1024.0;
    nlohmann::json model;
    request.profile = model_profile(a.model, a.profile, plan::needed_micro_batch_rows(request), a.repeats, a.quiet, &model,
                                    true);
    if (a.measure) {
      // The all-reduces the candidates run: the whole model's gradients (P = 1), half, a quarter.
      const double bytes = 4.0 * static_cast<double>(request.profile.parameter_elements());
      double probe_seconds = 0;
      const std::string why = measure_process_links(&request.cluster, {bytes / 4, bytes / 2, bytes}, &probe_seconds);
      process_links_measured = why.empty();
      process_links = process_links_measured
                          ? "measured by mpirun -np 2 in " + seconds_text(probe_seconds) + " s"
                          : "not measured (" + why + "): candidates with D > 1 use the thread-measured link";
      note(a, "processes' links " + process_links);
    }
    double calibration_seconds = 0;
    if (a.calibration_steps > 0 && !request.profile.calibration.measured) {
      const auto t0 = std::chrono::steady_clock::now();
      request.profile.calibration = calibration(a, request);
      calibration_seconds = seconds_since(t0);
      note(a, "calibrated in " + seconds_text(calibration_seconds) + " s");
    }
    // Processes (D > 1): their layer times, when the processes' links were measured.
    if (calibration_seconds > 0 && process_links_measured && request.cluster.devices() >= 2) {
      double took = 0;
      const std::string why = calibrate_process_steps(a, &request, &took);
      if (why.empty()) {
        calibration_seconds += took;
      } else {
        process_links += "; the processes' layer times not measured (" + why + ")";
        note(a, "processes' layer times not measured: " + why);
      }
    }
    if (!a.save_profile.empty()) write_file(a.save_profile, plan::profile_to_json(request.profile).dump(2) + "\n", "--save-profile");
    const plan::Plan plan = plan::make_plan(request);
    const double limit = request.limit();
    const std::string title = model.value("model", std::string("model")) + ", batch " + std::to_string(a.batch_size) +
                              ", " + std::to_string(request.cluster.devices()) + " " + request.cluster.device_kind +
                              " devices";
    if (!a.svg.empty()) write_file(a.svg, plan::plan_svg(plan, limit, title), "--svg");
    nlohmann::json out = plan::plan_to_json(plan, request, static_cast<size_t>(a.top));
    out["model"] = model;
    out["process_links"] = process_links;
    if (calibration_seconds > 0) out["calibration_seconds"] = calibration_seconds;
    if (!plan.ranked.empty()) {
      out["train_config"] = effective_train_config(train_args_for(a, plan.ranked[0]));
      // The command that trains as the plan says: tensor or data parallelism trains one process
      // per rank and member (mpirun -np T x D x P), a pipeline alone runs as threads of one process.
      const plan::Candidate& choice = plan.ranked[0].candidate;
      const int processes = choice.data_parallel > 1 || choice.tensor_parallel > 1
                                ? choice.tensor_parallel * choice.data_parallel * choice.ranks
                                : 1;
      if (!a.out.empty()) out["run_with"] = launch_line(processes, "train --plan " + shell_quote_if_needed(a.out));
      if (!a.out.empty()) write_file(a.out, out.dump(2) + "\n", "--out");
    }
    if (a.json) {
      std::cout << out.dump() << std::endl;
    } else {
      std::cout << title << "; memory limit " << limit / (1024.0 * 1024.0) << " MiB per device\n";
      std::cout << "processes' links (D > 1): " << process_links << "\n";
      std::cout << plan::ranked_table(plan, limit, static_cast<size_t>(a.top));
      if (out.contains("run_with"))
        std::cout << "plan: " << a.out << "; train as it says with:\n  " << out["run_with"].get<std::string>() << "\n";
      if (!a.svg.empty()) std::cout << "chart: " << a.svg << "\n";
    }
    if (plan.ranked.empty()) {
      std::fflush(stdout);
      std::cerr << "pipeforge plan: no candidate fits in " << limit / (1024.0 * 1024.0) << " MiB per device ("
                << (a.memory_limit_gib > 0 ? "--memory-limit-gib" : a.measure ? "this machine's memory" : a.cluster + ": device.memory_gib");
      if (!plan.too_big.empty())
        std::cerr << "); the smallest that works: " << plan.too_big[0].peak_memory_bytes / (1024.0 * 1024.0)
                  << " MiB per device (" << plan.too_big[0].candidate.describe() << ")";
      else
        std::cerr << ")";
      std::cerr << "\n";
      return kExitFailure;
    }
    return kExitOk;
  } catch (const Error& e) {
    std::fflush(stdout);
    std::cerr << "pipeforge plan: " << e.what() << "\n";
    return e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kNotFound ? kExitUsage : kExitFailure;
  }
}

}  // namespace pf::cli
