#include "tools/cli/train_command.h"

#include <csignal>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/backend/mpi_backend.h"
#include "runtime/comm/mpi_launch.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/synthetic_classification.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/interop/hf_models.h"
#include "runtime/models/builders.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/run/capabilities.h"
#include "runtime/run/make_trainer.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/run/training_loop.h"
#include "runtime/train/local_heads.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/train/sequential_trainer.h"
#include "tools/cli/cli.h"
#include "tools/cli/interrupt.h"
#include "tools/cli/progress.h"
#include "tools/cli/schedule_command.h"
#include "tools/cli/train_config.h"
#include "tools/cli/train_config_of.h"
#include "tools/cli/train_report.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {
namespace {

// How long a process waits for the others to agree on stopping after a step (they are at most
// one step apart).
constexpr double kStopAgreementTimeoutSeconds = 600;

[[noreturn]] void usage_error(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// What the flags need of each other (the combinations of what to train are the capability
// table's, checked when the trainer is made); throws kInvalidArgument with the option's name.
// Every file the run will write, checked before it starts (runtime/core/output_file.h): a bad
// path fails now, not after the training it would lose. Folders on the way are created.
void check_output_paths(const TrainArgs& a) {
  if (!a.trace_file.empty()) check_output_path(a.trace_file, "--trace");
  if (!a.svg_file.empty()) check_output_path(a.svg_file, "--svg");
  if (!a.metrics_log.empty()) check_output_path(a.metrics_log, "--metrics-log");
  if (!a.checkpoint.empty()) {
    struct stat st;
    const bool folder = ::lstat(a.checkpoint.c_str(), &st) == 0 && S_ISDIR(st.st_mode);  // a sharded checkpoint
    if (!folder) check_output_path(a.checkpoint, "--checkpoint");
  }
  if (!a.checkpoint_dir.empty()) check_output_path(a.checkpoint_dir + "/manifest.json", "--checkpoint-dir");
}

void check_args(const TrainArgs& a) {
  if (a.batch_size % a.micro_batches != 0) {
    usage_error("--batch-size " + std::to_string(a.batch_size) + " is not divisible by --microbatches " +
                std::to_string(a.micro_batches));
  }
  if (a.model == "mlp") {
    if (a.vocab > 0) usage_error("--vocab applies to --model gpt or llama only");
  } else {
    if (a.d_model % a.heads != 0) {
      usage_error("--d-model " + std::to_string(a.d_model) + " is not divisible by --heads " +
                  std::to_string(a.heads));
    }
  }
  if (a.kv_heads > 0 && a.model != "llama") usage_error("--kv-heads applies to --model llama only");
  if (a.tie_embeddings && a.model == "mlp") usage_error("--tie-embeddings applies to --model gpt or llama only");
  if (a.model == "llama" && a.kv_heads > 0 && a.heads % a.kv_heads != 0)
    usage_error("--heads " + std::to_string(a.heads) + " is not divisible by --kv-heads " + std::to_string(a.kv_heads));
  if (a.model == "llama" && (a.d_model / a.heads) % 2 != 0)
    usage_error("--model llama: the head dimension --d-model / --heads = " + std::to_string(a.d_model / a.heads) +
                " must be even (rotary positions turn pairs of it)");
  if (a.optimizer == "adamw" && a.momentum != 0.0) usage_error("--momentum applies to --optimizer sgd only");
  if (a.eval_every == 0 && (a.eval_batches != 0 || a.held_out >= 0))
    usage_error("--eval-batches and --held-out need --eval-every");
  if (a.checkpoint_every > 0 && a.checkpoint_dir.empty())
    usage_error("--checkpoint-every " + std::to_string(a.checkpoint_every) + " needs --checkpoint-dir (the folder "
                "of the checkpoints)");
  if (a.checkpoint_every == 0 && !a.checkpoint_dir.empty()) usage_error("--checkpoint-dir needs --checkpoint-every");
  if (a.lr_schedule == "constant" && (a.decay_steps > 0 || a.min_lr != 0.0))
    usage_error("--decay-steps and --min-lr apply to --lr-schedule cosine or linear only");
  if (a.lr_schedule != "constant" && !a.resume.empty() && a.decay_steps <= 0)
    usage_error("--lr-schedule " + a.lr_schedule + " with --resume needs --decay-steps: its default (--steps minus "
                "--warmup-steps) would count this run's steps only, and the resumed rates would differ");
  if (!a.model_json.empty() || !a.model_file.empty() || !a.init_from.empty()) {
    if (a.layers >= 0 || a.hidden >= 0 || a.vocab > 0 || a.kv_heads > 0 || a.tie_embeddings)
      usage_error("--layers, --hidden, --kv-heads and --vocab describe the built-in models; the model file (or the "
                  "--init-from folder's config.json) describes its own");
  }
  if (!a.init_from.empty() && !a.resume.empty())
    usage_error("--init-from and --resume both give the weights; give one (a checkpoint of a run started with "
                "--init-from resumes with --resume alone)");
  if (a.slow_factor != 1.0 && a.slow_rank < 0) usage_error("--slow-factor needs --slow-rank");
  if (!a.adapt && (a.adapt_threshold != 1.5 || a.adapt_patience != 3 || !a.profile.empty()))
    usage_error("--adapt-threshold, --adapt-patience and --profile need --adapt");
  const bool pipelined = !a.schedule.empty() || !a.schedule_file.empty();
  if (!pipelined && (!a.trace_file.empty() || !a.svg_file.empty()))
    usage_error("--trace and --svg need --schedule or --schedule-file");
}

// What the run will do besides training (evaluation, checkpoints), against the capability table:
// refused before the first step rather than when it comes.
void check_operations(const TrainArgs& a, Trainer& trainer) {
  auto check = [&](bool asked, Operation operation, const std::string& flag) {
    if (!asked) return;
    const Refusal r = operation_refusal(trainer, operation, cli_option_name);
    if (r.refused()) throw Error(ErrorCode::kInvalidArgument, flag + ": " + r.message);  // a usage error
  };
  check(a.eval_every > 0, Operation::kEvaluate, "--eval-every");
  check(a.checkpoint_every > 0, Operation::kPeriodicCheckpoint, "--checkpoint-every");
  check(!a.checkpoint.empty(), Operation::kCheckpoint, "--checkpoint");
  check(!a.resume.empty(), Operation::kLoadCheckpoint, "--resume");
}



// Each top-level layer's measured seconds on the first micro-batch of the data (the data position
// is left where it was): what --partition balanced splits by.
std::vector<double> layer_times(Model& model, DataSource& data) {
  const int64_t position = data.position();
  const Batch sample = data.next();
  data.seek(position);
  return exec::measure_layer_times(model, sample, 5);  // the median of 5: steadier on a busy machine
}

// --partition balanced under mpirun. The processes hold only their own stages' parameters, so the
// world's rank 0 builds a whole model of its own for the measurement (freed after it) and sends the
// times; every process then splits by the same numbers. An error there reaches every process.
std::vector<double> layer_times_of_world(const TrainArgs& a, comm::World& world) {
  constexpr double kTimeoutSeconds = 600.0;  // the measurement: 5 forward + backward passes of the model
  std::string message;
  if (world.rank() == 0) {
    try {
      Setup whole = make_setup(a);
      message = nlohmann::json{{"times", layer_times(*whole.model, *whole.data)}}.dump();
    } catch (const Error& e) {
      message = nlohmann::json{{"error", e.what()}, {"code", static_cast<int>(e.code())}}.dump();
    }
  }
  comm::broadcast_string(world, &message, 0, kTimeoutSeconds);
  const nlohmann::json reply = nlohmann::json::parse(message);
  if (reply.contains("error")) {
    throw Error(static_cast<ErrorCode>(reply["code"].get<int>()),
                "--partition balanced (measured by rank 0): " + reply["error"].get<std::string>());
  }
  return reply["times"].get<std::vector<double>>();
}

// Under mpirun (more than one process): each process runs one rank of a schedule, and the outputs
// that draw one process's timeline are not written yet.
void check_process_args(const TrainArgs& a, const comm::World& world) {
  const std::string where = " under mpirun (" + std::to_string(world.size()) + " processes)";
  if (a.tensor_parallel > 1) {
    // T x P x D processes: each a member of one tensor-parallel group, running the sequential
    // trainer (P = D = 1) or one rank of the schedule for one replica.
    const std::string needed = std::to_string(a.tensor_parallel * a.stages * a.data_parallel);
    if (world.size() != a.tensor_parallel * a.stages * a.data_parallel)
      usage_error("--tensor-parallel " + std::to_string(a.tensor_parallel) + " needs " + needed + " processes" + where +
                  " (T x P x D: launch mpirun -np " + needed + ")");
  } else if (a.schedule.empty() && a.schedule_file.empty()) {
    usage_error("--schedule or --schedule-file is needed" + where + ": each process runs one rank of it");
  }
  if (!a.trace_file.empty() || !a.svg_file.empty())
    usage_error("--trace and --svg are not supported" + where + " yet");
}

// --describe: the model's top-level layers, the units a partition counts.
int describe_model(const TrainArgs& a, const Model& model) {
  nlohmann::json layers = nlohmann::json::array();
  const std::vector<int64_t> parameters = exec::layer_parameter_counts(model);
  for (size_t i = 0; i < model.layers().size(); ++i) {
    const auto& layer = model.layers()[i];
    layers.push_back({{"name", layer->name()}, {"type", layer->type()}, {"parameters", parameters[i]}});
  }
  if (a.json) {
    std::cout << nlohmann::json({{"model", model_name(a)},
                                 {"num_parameters", model.num_distinct_parameter_elements()},
                                 {"layers", layers}})
                     .dump()
              << std::endl;
    return kExitOk;
  }
  std::printf("%s: %lld parameters in %zu top-level layers (--layers-per-stage counts these):\n",
              model_name(a).c_str(), static_cast<long long>(model.num_distinct_parameter_elements()), layers.size());
  for (size_t i = 0; i < layers.size(); ++i)
    std::printf("  %2zu  %-18s %-20s %10lld parameters\n", i, layers[i]["name"].get<std::string>().c_str(),
                layers[i]["type"].get<std::string>().c_str(), static_cast<long long>(layers[i]["parameters"].get<int64_t>()));
  return kExitOk;
}

// This process's parameter, gradient and optimizer-state bytes, for every process (rank order).
nlohmann::json process_memory(comm::World* world) {
  const MemoryStats m = memory_tracker(Device::cpu()).stats();
  const std::vector<int64_t> mine = {m.current[static_cast<int>(MemoryCategory::kParameters)],
                                     m.current[static_cast<int>(MemoryCategory::kGradients)],
                                     m.current[static_cast<int>(MemoryCategory::kOptimizerState)]};
  const std::vector<int64_t> all = world ? comm::all_gather_int64s(*world, mine, 600.0) : mine;
  nlohmann::json out = nlohmann::json::array();
  for (size_t r = 0; r * 3 < all.size(); ++r) {
    out.push_back({{"rank", r},
                   {"parameter_bytes", all[r * 3]},
                   {"gradient_bytes", all[r * 3 + 1]},
                   {"optimizer_bytes", all[r * 3 + 2]}});
  }
  return out;
}

// --adapt --profile FILE: the profile at the run's micro-batch rows (without --profile the
// adaptive trainer measures one at its first step).
std::optional<plan::MicroBatchCosts> adaptation_profile(const TrainArgs& a) {
  if (!a.adapt || a.profile.empty()) return std::nullopt;
  const int64_t rows = a.batch_size / a.micro_batches;
  nlohmann::json description;
  try {
    return model_profile(a, a.profile, {rows}, 3, true, &description).at_rows(rows);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("--adapt: ") + e.what());
  }
}

// "step 4: rank 1 ran 2.9x slower than predicted for 3 steps; re-partitioned 5+4 -> 6+3 layers"
std::string describe_adaptation(const plan::Adaptation& m, int patience) {
  const size_t slowest =
      static_cast<size_t>(std::max_element(m.slowdown.begin(), m.slowdown.end()) - m.slowdown.begin());
  char factor[32];
  std::snprintf(factor, sizeof factor, "%.1fx", m.slowdown[slowest]);
  return "step " + std::to_string(m.step) + ": rank " + std::to_string(slowest) + " ran " + factor +
         " slower than predicted for " + std::to_string(patience) + " steps; re-partitioned " + join_numbers(m.from) +
         " -> " + join_numbers(m.to) + " layers";
}

}  // namespace

namespace {

// A run being set up and trained: the model and its data, the trainer, where the processes are.
struct TrainRun {
  Setup setup;
  std::unique_ptr<Trainer> trainer;
  std::shared_ptr<comm::World> launch;  // one process per rank under mpirun; null alone
  comm::ProcessGrid grid;
  std::string resumed_from;  // the checkpoint --resume named (the newest of a series folder)
  std::vector<double> layer_seconds;  // --partition balanced: each top-level layer's measured time
  bool leader = true;        // prints the results
  // The pipelined trainer running now (an adaptive trainer's changes at a move), or null.
  exec::PipelineTrainer* pipeline() const { return trainer ? pipeline_of(*trainer) : nullptr; }
};

// The config, the process groups, the model and data, the trainer, the resumed checkpoint.
// Returns -1 to go on, or the exit code (--describe, a usage error).
int prepare_run(const TrainArgs& a, TrainRun& run) {
  // One process per rank under mpirun (D x P processes with --data-parallel D); a lone process
  // (also `mpirun -np 1`) trains as before.
  if (comm::launched_by_mpi()) {
    run.launch = mpi_backend().launch_world();
    if (run.launch->size() == 1) run.launch = nullptr;
  }
  comm::World* world = run.launch.get();
  run.leader = !world || world->rank() == 0;
  try {
    check_args(a);
    if (run.leader) check_output_paths(a);
    TrainingConfig config = training_config_of(a);
    if (world) {
      check_process_args(a, *world);
      int ranks = config.schedule_text.empty() ? a.stages : sched::parse_schedule(config.schedule_text).num_ranks();
      if (a.neuron_groups > 1) ranks = (a.stages - 1) * a.neuron_groups + 1;  // a rank per group, and the last stage
      run.grid = mpi_backend().process_grid(*run.launch, a.tensor_parallel, a.data_parallel, ranks);
      // The sequential trainer under tensor parallelism runs no pipeline: no pipeline world.
      if (a.tensor_parallel == 1 || config.pipelined()) config.world = run.grid.pipeline;
      config.data_parallel_world = run.grid.data_parallel;
      if (a.tensor_parallel > 1) config.tensor_parallel_world = run.grid.tensor_parallel;
    }
    {
      // The trainer allocates its stages only; a tensor-parallel member its slices.
      std::unique_ptr<DeferParameterAllocation> defer;
      if (world) defer = std::make_unique<DeferParameterAllocation>();
      run.setup = make_setup(a);
    }
    if (a.describe) return describe_model(a, *run.setup.model);
    TrainerInputs inputs;
    inputs.names = cli_option_name;
    inputs.profile = adaptation_profile(a);
    if (config.pipelined() && config.partition == PartitionKind::kMeasured && config.layers_per_stage.empty())
      inputs.layer_costs = world ? layer_times_of_world(a, *world) : layer_times(*run.setup.model, *run.setup.data);
    run.layer_seconds = inputs.layer_costs;
    run.trainer = make_trainer(run.setup.model, config, inputs);
    // Saved in the checkpoints: `--resume` alone restores it (adopt_checkpoint_model).
    run.trainer->set_run_description(nlohmann::json::parse(effective_train_config(a).dump()));
    check_operations(a, *run.trainer);
    if (!a.init_from.empty()) load_hf_weights(run.trainer->model(), run.trainer->local_parameters(), a.init_from);
    if (!a.resume.empty()) {
      run.resumed_from = resolve_checkpoint(a.resume);
      try {
        load_trainer_checkpoint(*run.trainer, run.resumed_from);
      } catch (const Error& e) {
        // Another model than the checkpoint's: say which options made it, and the way out.
        if (e.code() != ErrorCode::kInvalidArgument || a.model_options_given.empty()) throw;
        std::string given;
        for (const std::string& o : a.model_options_given) given += (given.empty() ? "" : ", ") + o;
        fail(ErrorCode::kInvalidArgument, "--resume ", a.resume, ": ", e.what(), ". The model options given (",
             given, ") describe another model than the checkpoint's; leave them out to resume the model it was "
             "saved with");
      }
      run.setup.data->seek(run.trainer->metrics().data_position);
    }
  } catch (const Error& e) {
    // Bad options and unreadable inputs are the caller's to fix: usage errors (a combination that
    // is not supported yet too: the run cannot start either way).
    if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kNotFound ||
        e.code() == ErrorCode::kDataLoss || e.code() == ErrorCode::kUnimplemented) {
      std::cerr << "pipeforge train: " << e.what() << "\n";
      return kExitUsage;
    }
    throw;
  }
  return -1;
}

// The training loop with its progress bar, adding up what the report prints.
TrainTotals train_loop(const TrainArgs& a, TrainRun& run) {
  Trainer& trainer = *run.trainer;
  plan::AdaptiveTrainer* adaptive = adaptive_of(trainer);
  TrainTotals t;
  t.first_step = trainer.metrics().step;
  t.losses.reserve(static_cast<size_t>(a.steps));
  t.ranks = run.pipeline() ? run.pipeline()->schedule().num_ranks() : 1;
  if (const groups::NeuronGroupTrainer* g = neuron_groups_of(*run.trainer)) t.ranks = g->network().ranks();
  t.peak_bytes.assign(static_cast<size_t>(t.ranks), 0.0);
  t.peak_versions.assign(static_cast<size_t>(t.ranks), 0);
  t.busy_us.assign(static_cast<size_t>(t.ranks), 0.0);
  t.idle_us.assign(static_cast<size_t>(t.ranks), 0.0);
  t.idle_share_sum.assign(static_cast<size_t>(t.ranks), 0.0);
  t.sent_bytes.assign(static_cast<size_t>(t.ranks), 0);
  TrainingLoopOptions loop;
  loop.steps = a.steps;
  loop.eval_every = a.eval_every;
  loop.eval_micro_batches = a.eval_batches > 0 ? a.eval_batches : a.micro_batches;
  loop.checkpoint_every = a.checkpoint_every;
  loop.checkpoint_dir = a.checkpoint_dir;
  loop.keep_checkpoints = a.keep_checkpoints;
  loop.metrics_log = a.metrics_log;
  loop.writes_files = run.leader;
  loop.sharded_checkpoints = run.launch != nullptr;
  if (adaptive) loop.log_fields = [&](int64_t step) { return plan::adaptation_log_fields(adaptive->adaptations(), step); };
  size_t adaptations_told = 0;
  // Ctrl-C or SIGTERM: stop after the step in progress, on every process at the same step.
  InterruptGuard interrupts(run.leader);
  loop.should_stop = [&run](const StepReport&) {
    double stop = InterruptGuard::signal_received();
    if (run.launch) run.launch->all_reduce_sum(&stop, 1, kStopAgreementTimeoutSeconds);
    return stop > 0;
  };
  ProgressBar progress(a.steps, t.first_step, !a.quiet && run.leader);
  run_training(trainer, *run.setup.data, run.setup.held_out.get(), loop, [&](const StepReport& report) {
    t.add_step(report.result, run.pipeline());
    if (report.eval) {
      t.evaluations.push_back({{"step", report.step},
                               {"loss", finite_or_null(report.eval->loss)},
                               {"accuracy", report.eval->accuracy}});
      progress.note("step " + std::to_string(report.step) + ": held-out loss " + format_number(report.eval->loss) +
                    ", accuracy " + format_number(report.eval->accuracy));
    }
    if (!report.checkpoint.empty()) t.checkpoints.push_back(report.checkpoint);
    for (; adaptive && adaptations_told < adaptive->adaptations().size(); ++adaptations_told)
      if (!a.json)
        progress.note("pipeforge train: " +
                      describe_adaptation(adaptive->adaptations()[adaptations_told], a.adapt_patience));
    progress.update(report.step - t.first_step, report.result.loss, t.tokens_per_s());
    if (!report.divergence.empty()) t.divergence = report.divergence;
    if (report.stopped) t.stopped_by = InterruptGuard::signal_received() ? InterruptGuard::signal_received() : SIGINT;
    return true;
  });
  return t;
}

// After the loop: the timeline outputs, the drain, the checksum, the final checkpoint.
void finish_run(const TrainArgs& a, TrainRun& run, TrainTotals& t) {
  Trainer& trainer = *run.trainer;
  t.diverged = !t.divergence.empty();
  if (t.diverged && run.leader) {
    std::cerr << "pipeforge train: error: training diverged at step " << trainer.metrics().step << ": "
              << t.divergence << (a.checkpoint.empty() ? "" : "; no checkpoint written")
              << " (try a smaller --lr or --clip-norm)\n";
  }
  if (exec::PipelineTrainer* p = run.pipeline()) {
    if (!a.trace_file.empty()) write_output_file(a.trace_file, sched::to_chrome_trace(p->last_timeline()), "--trace");
    if (!a.svg_file.empty()) {
      sched::SvgOptions svg;
      svg.width = a.svg_width;
      svg.title = timeline_title(p->schedule(), a.micro_batches,
                                 "step " + std::to_string(trainer.metrics().step) + " measured",
                                 p->last_stats().bubble_rate);
      write_output_file(a.svg_file, sched::to_svg(p->last_timeline(), svg), "--svg");
    }
  }
  trainer.drain();  // asynchronous and local schedules: the micro-batches in flight finish before the results
  t.checksum = run.pipeline() ? run.pipeline()->parameter_checksum()
                               : whole_parameter_checksum(trainer.model().parameters(),
                                                          trainer.model().tensor_parallel_group().get());
  t.memory = process_memory(run.launch.get());
  t.saved = !a.checkpoint.empty() && !t.diverged;
  if (t.saved) save_trainer_checkpoint(trainer, a.checkpoint);
  if (t.stopped_by != 0 && run.leader) {
    std::string where = t.saved ? "checkpoint saved to " + a.checkpoint
                        : !t.checkpoints.empty() ? "checkpoint saved to " + t.checkpoints.back()
                                                 : "no checkpoint configured (--checkpoint or --checkpoint-dir): "
                                                   "the steps run are not saved";
    std::fflush(stdout);
    std::cerr << "pipeforge train: interrupted by " << signal_name(t.stopped_by) << " after step "
              << trainer.metrics().step << "; " << where << "\n";
  }
}

}  // namespace

int run_train(const TrainArgs& a) {
  TrainRun run;
  if (const int code = prepare_run(a, run); code >= 0) return code;
  if (!a.json && !a.quiet && run.leader) print_run_start(a, *run.trainer, run.resumed_from);
  TrainTotals totals = train_loop(a, run);
  finish_run(a, run, totals);
  if (run.leader) {
    const TrainReport report{a, *run.trainer, run.pipeline(), adaptive_of(*run.trainer), neuron_groups_of(*run.trainer),
                             run.launch.get(),
                             run.setup.description, run.resumed_from, run.layer_seconds, totals};
    if (a.json) print_json_report(report);
    else print_summary(report);
    if (!a.quiet) warn_idle_ranks(report);
  }
  if (totals.stopped_by != 0) return 128 + totals.stopped_by;  // as the shell reports a signal
  return totals.diverged ? kExitFailure : kExitOk;
}

}  // namespace pf::cli
