#include "tools/cli/train_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/backend/mpi_backend.h"
#include "runtime/comm/mpi_launch.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/synthetic_classification.h"
#include "runtime/execution/pipeline_trainer.h"
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
#include "tools/cli/progress.h"
#include "tools/cli/schedule_command.h"
#include "tools/cli/train_config_of.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {
namespace {

[[noreturn]] void usage_error(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// What the flags need of each other (the combinations of what to train are the capability
// table's, checked when the trainer is made); throws kInvalidArgument with the option's name.
void check_args(const TrainArgs& a) {
  if (a.batch_size % a.micro_batches != 0) {
    usage_error("--batch-size " + std::to_string(a.batch_size) + " is not divisible by --microbatches " +
                std::to_string(a.micro_batches));
  }
  if (a.model == "mlp") {
    if (!a.data.empty()) usage_error("--data applies to --model gpt only");
  } else {
    if (a.d_model % a.heads != 0) {
      usage_error("--d-model " + std::to_string(a.d_model) + " is not divisible by --heads " +
                  std::to_string(a.heads));
    }
  }
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
  if (!a.model_json.empty() || !a.model_file.empty()) {
    if (a.layers >= 0 || a.hidden >= 0)
      usage_error("--layers and --hidden describe the built-in models; the model file describes its own");
  }
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

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }


// Each top-level layer's measured seconds on the first micro-batch of the data (the data position
// is left where it was): what --partition balanced splits by.
std::vector<double> layer_times(Model& model, DataSource& data) {
  const int64_t position = data.position();
  const Batch sample = data.next();
  data.seek(position);
  return exec::measure_layer_times(model, sample, 3);
}

// --partition balanced under mpirun. The processes hold only their own stages' parameters, so the
// world's rank 0 builds a whole model of its own for the measurement (freed after it) and sends the
// times; every process then splits by the same numbers. An error there reaches every process.
std::vector<double> layer_times_of_world(const TrainArgs& a, comm::World& world) {
  constexpr double kTimeoutSeconds = 600.0;  // the measurement: 3 forward + backward passes of the model
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
  if (a.schedule.empty() && a.schedule_file.empty())
    usage_error("--schedule or --schedule-file is needed" + where + ": each process runs one rank of it");
  if (!a.trace_file.empty() || !a.svg_file.empty())
    usage_error("--trace and --svg are not supported" + where + " yet");
}

// The partition the run used: top-level layers per stage and the rank of each stage.
nlohmann::json partition_json(const Model& model, const exec::PipelineTrainer* pipeline) {
  if (!pipeline) {
    return {{"layers_per_stage", {model.layers().size()}}, {"stage_ranks", {0}}};
  }
  return {{"layers_per_stage", exec::layer_counts(pipeline->parts().stages.ranges())},
          {"stage_ranks", pipeline->schedule().placement.stage_to_rank}};
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
                                 {"num_parameters", model.num_parameter_elements()},
                                 {"layers", layers}})
                     .dump()
              << std::endl;
    return kExitOk;
  }
  std::printf("%s: %lld parameters in %zu top-level layers (--layers-per-stage counts these):\n",
              model_name(a).c_str(), static_cast<long long>(model.num_parameter_elements()), layers.size());
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

// Numbers joined by `separator`: layers per stage as "5+4", ranks as "0, 1".
std::string join_numbers(const std::vector<int>& values, const char* separator = "+") {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? separator : "") + std::to_string(values[i]);
  return out;
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

int run_train(const TrainArgs& a) {
  Setup setup;
  std::unique_ptr<Trainer> trainer;
  // The pipelined trainer running now (an adaptive trainer's changes at a move), or null.
  auto pipeline = [&]() -> exec::PipelineTrainer* { return trainer ? pipeline_of(*trainer) : nullptr; };
  // One process per rank under mpirun (D x P processes with --data-parallel D); a lone process
  // (also `mpirun -np 1`) trains as before.
  std::shared_ptr<comm::World> launch;
  if (comm::launched_by_mpi()) {
    launch = mpi_backend().launch_world();
    if (launch->size() == 1) launch = nullptr;
  }
  comm::World* world = launch.get();
  comm::ProcessGrid grid;
  std::string resumed_from;  // the checkpoint --resume named (the newest of a series folder)
  const bool leader = !launch || launch->rank() == 0;  // prints the results
  try {
    check_args(a);
    TrainingConfig config = training_config_of(a);
    if (world) {
      check_process_args(a, *world);
      const int ranks = config.schedule_text.empty() ? a.stages : sched::parse_schedule(config.schedule_text).num_ranks();
      grid = mpi_backend().process_grid(*launch, a.data_parallel, ranks);
      config.world = grid.pipeline;
      config.data_parallel_world = grid.data_parallel;
    }
    {
      std::unique_ptr<DeferParameterAllocation> defer;
      if (world) defer = std::make_unique<DeferParameterAllocation>();  // the trainer allocates its stages only
      setup = make_setup(a);
    }
    if (a.describe) return describe_model(a, *setup.model);
    TrainerInputs inputs;
    inputs.names = cli_option_name;
    inputs.profile = adaptation_profile(a);
    if (config.pipelined() && config.partition == PartitionKind::kMeasured && config.layers_per_stage.empty())
      inputs.layer_costs = world ? layer_times_of_world(a, *world) : layer_times(*setup.model, *setup.data);
    trainer = make_trainer(setup.model, config, inputs);
    check_operations(a, *trainer);
    if (!a.resume.empty()) {
      resumed_from = resolve_checkpoint(a.resume);
      load_trainer_checkpoint(*trainer, resumed_from);
      setup.data->seek(trainer->metrics().data_position);
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
  plan::AdaptiveTrainer* adaptive = adaptive_of(*trainer);

  const Model& model = trainer->model();
  const int64_t first_step = trainer->metrics().step;
  if (!a.json && !a.quiet && leader) {
    std::cerr << "pipeforge train: " << model_name(a) << ", " << model.num_parameter_elements()
              << " parameters, " << a.steps << " steps of " << a.batch_size << " rows in " << a.micro_batches
              << " micro-batch(es)"
              << (a.data_parallel > 1 ? " per replica, " + std::to_string(a.data_parallel) + " replicas" : "")
              << (resumed_from.empty() ? ""
                                       : ", resumed from " + resumed_from + " at step " + std::to_string(first_step))
              << "\n";
  }

  std::vector<double> losses;
  losses.reserve(static_cast<size_t>(a.steps));
  // Peak activation bytes per rank over the run (measured per rank by the pipeline; for the
  // sequential trainer, its one micro-batch's contexts).
  const int ranks = pipeline() ? pipeline()->schedule().num_ranks() : 1;
  std::vector<double> peak_bytes(static_cast<size_t>(ranks), 0.0);
  std::vector<int> peak_versions(static_cast<size_t>(ranks), 0);  // asynchronous schedules
  double bubble_sum = 0.0;
  double offloaded_bytes = 0.0;
  int64_t tokens = 0;
  double seconds = 0.0;
  nlohmann::json evaluations = nlohmann::json::array();
  std::vector<std::string> checkpoints;
  TrainingLoopOptions loop;
  loop.steps = a.steps;
  loop.eval_every = a.eval_every;
  loop.eval_micro_batches = a.eval_batches > 0 ? a.eval_batches : a.micro_batches;
  loop.checkpoint_every = a.checkpoint_every;
  loop.checkpoint_dir = a.checkpoint_dir;
  loop.keep_checkpoints = a.keep_checkpoints;
  loop.metrics_log = a.metrics_log;
  loop.writes_files = leader;
  loop.sharded_checkpoints = world != nullptr;
  if (adaptive) loop.log_fields = [&](int64_t step) { return plan::adaptation_log_fields(adaptive->adaptations(), step); };
  size_t adaptations_told = 0;
  {
    ProgressBar progress(a.steps, first_step, !a.quiet && leader);
    run_training(*trainer, *setup.data, setup.held_out.get(), loop, [&](const StepReport& report) {
      const StepResult& r = report.result;
      losses.push_back(r.loss);
      bubble_sum += r.bubble_rate;
      if (pipeline()) {
        const exec::PipelineStats& stats = pipeline()->last_stats();
        offloaded_bytes = static_cast<double>(stats.offloaded_bytes);
        for (int rank = 0; rank < ranks; ++rank)
          peak_versions[rank] = std::max(peak_versions[rank], stats.ranks[rank].peak_weight_versions);
      }
      for (size_t rank = 0; rank < r.peak_activation_bytes.size() && rank < peak_bytes.size(); ++rank)
        peak_bytes[rank] = std::max(peak_bytes[rank], static_cast<double>(r.peak_activation_bytes[rank]));
      tokens += r.tokens;
      seconds += r.seconds;
      if (report.eval) {
        evaluations.push_back({{"step", report.step},
                               {"loss", finite_or_null(report.eval->loss)},
                               {"accuracy", report.eval->accuracy}});
        progress.note("step " + std::to_string(report.step) + ": held-out loss " +
                      format_number(report.eval->loss) + ", accuracy " + format_number(report.eval->accuracy));
      }
      if (!report.checkpoint.empty()) checkpoints.push_back(report.checkpoint);
      for (; adaptive && adaptations_told < adaptive->adaptations().size(); ++adaptations_told)
        if (!a.json)
          progress.note("pipeforge train: " +
                        describe_adaptation(adaptive->adaptations()[adaptations_told], a.adapt_patience));
      progress.update(report.step - first_step, r.loss, seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0);
      return true;
    });
  }
  const int64_t steps_run = static_cast<int64_t>(losses.size());
  const bool diverged = !std::isfinite(losses.back());
  if (diverged && leader) {
    std::cerr << "pipeforge train: error: training diverged at step " << trainer->metrics().step << ": the loss is "
              << losses.back() << (a.checkpoint.empty() ? "" : "; no checkpoint written")
              << " (try a smaller --lr or --clip-norm)\n";
  }
  const double tokens_per_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
  const double bubble_rate = pipeline() ? bubble_sum / static_cast<double>(steps_run) : 0.0;
  if (pipeline() && !a.trace_file.empty()) {
    std::ofstream(a.trace_file) << sched::to_chrome_trace(pipeline()->last_timeline());
  }
  if (pipeline() && !a.svg_file.empty()) {
    sched::SvgOptions svg;
    svg.width = a.svg_width;
    svg.title = timeline_title(pipeline()->schedule(), a.micro_batches,
                               "step " + std::to_string(trainer->metrics().step) + " measured",
                               pipeline()->last_stats().bubble_rate);
    std::ofstream(a.svg_file) << sched::to_svg(pipeline()->last_timeline(), svg);
  }
  // Asynchronous schedules: the micro-batches still in flight finish before the results.
  if (pipeline()) pipeline()->drain();
  const std::string checksum = pipeline() ? pipeline()->parameter_checksum() : parameter_checksum(model.parameters());
  const nlohmann::json memory = process_memory(world);
  const bool save = !a.checkpoint.empty() && !diverged;
  if (save) save_trainer_checkpoint(*trainer, a.checkpoint);

  if (!leader) return diverged ? kExitFailure : kExitOk;
  if (a.json) {
    nlohmann::json out;
    out["model"] = !a.model_file.empty() || !a.model_json.empty() ? "json" : a.model;
    if (!a.model_file.empty()) out["model_file"] = a.model_file;
    out["config"] = setup.description;
    out["num_parameters"] = model.num_parameter_elements();
    out["steps"] = trainer->metrics().step;
    out["steps_run"] = steps_run;
    out["diverged"] = diverged;
    out["resumed_from_step"] = first_step;
    if (!resumed_from.empty()) out["resumed_from"] = resumed_from;
    out["lr_schedule"] = lr_schedule(a).to_json();
    out["last_lr"] = trainer->optimizer().config().lr;
    out["evaluations"] = evaluations;
    out["checkpoints"] = checkpoints;
    out["partition"] = partition_json(trainer->model(), pipeline());
    out["micro_batches"] = a.micro_batches;
    out["batch_size"] = a.batch_size;
    out["seed"] = a.seed;
    out["optimizer"] = trainer->optimizer().config().to_json();
    out["loss"] = finite_or_null(losses.back());
    out["first_loss"] = finite_or_null(losses.front());
    nlohmann::json all = nlohmann::json::array();
    for (double l : losses) all.push_back(finite_or_null(l));
    out["losses"] = all;
    out["tokens"] = tokens;
    out["seconds"] = seconds;
    out["tokens_per_s"] = tokens_per_s;
    out["data_position"] = trainer->metrics().data_position;
    out["param_checksum"] = checksum;
    out["schedule"] = pipeline() ? pipeline()->schedule().name : "sequential";
    out["stages"] = ranks;
    out["bubble_rate"] = bubble_rate;  // measured, mean over the steps run (0 for sequential)
    out["peak_activation_bytes"] = peak_bytes;
    out["activation_policy"] = a.activation_policy;
    out["offloaded_bytes_per_step"] = offloaded_bytes;  // of the last step
    out["processes"] = world ? world->size() : 1;
    out["data_parallel"] = a.data_parallel;
    out["gradient_reduction"] = a.gradient_reduction;
    out["process_memory"] = memory;  // per process: its stages' parameters, gradients, optimizer state
    out["asynchronous"] = pipeline() != nullptr && pipeline()->plan().schedule.traits.asynchronous();
    out["local_learning"] = pipeline() != nullptr && pipeline()->plan().schedule.traits.local_learning();
    if (out["asynchronous"].get<bool>()) out["peak_weight_versions"] = peak_versions;
    if (adaptive) out["adaptations"] = plan::adaptations_to_json(adaptive->adaptations());
    if (save) out["checkpoint"] = a.checkpoint;
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("final loss %.6f (step %lld: %.6f) after %lld steps, %s tokens/s\n", losses.back(),
                static_cast<long long>(first_step + 1), losses.front(),
                static_cast<long long>(trainer->metrics().step),
                ProgressBar::format_rate(tokens_per_s).c_str());
    std::printf("parameter checksum (sha256): %s\n", checksum.c_str());
    if (pipeline()) {
      const std::string where =
          !world ? "threads of one process"
                 : a.data_parallel > 1 ? std::to_string(a.data_parallel) + " replicas, " +
                                             std::to_string(world->size()) + " processes"
                                       : "one process each";
      std::printf("%s on %d ranks (%s): measured bubble rate %.4f (mean over the steps)\n",
                  pipeline()->schedule().name.c_str(), ranks, where.c_str(), bubble_rate);
      std::printf("partition: %s top-level layers per stage (stages on ranks %s)\n",
                  join_numbers(exec::layer_counts(pipeline()->parts().stages.ranges())).c_str(),
                  join_numbers(pipeline()->schedule().placement.stage_to_rank, ", ").c_str());
      if (pipeline()->plan().schedule.traits.local_learning())
        std::printf("local learning: every stage but the last trains on its own %s head; no gradient crosses ranks\n",
                    a.local_head.c_str());
      if (pipeline()->plan().schedule.traits.asynchronous()) {
        std::string versions;
        for (int rank = 0; rank < ranks; ++rank)
          versions += (rank ? ", " : "") + std::to_string(peak_versions[static_cast<size_t>(rank)]);
        std::printf("asynchronous: no flush between steps, drained once at the end; weight versions per rank: %s\n",
                    versions.c_str());
      }
    }
    if (world) {
      std::string line;
      for (const auto& m : memory) {
        const double mb = (m["parameter_bytes"].get<double>() + m["gradient_bytes"].get<double>() +
                           m["optimizer_bytes"].get<double>()) / 1e6;
        char part[64];
        std::snprintf(part, sizeof(part), "%srank %d %.2f MB", line.empty() ? "" : ", ", m["rank"].get<int>(), mb);
        line += part;
      }
      std::printf("parameters + gradients + optimizer state per process: %s\n", line.c_str());
    }
    if (save) {
      std::printf("checkpoint saved to %s%s\n", a.checkpoint.c_str(),
                  world ? " (a folder: one shard per pipeline rank and manifest.json)" : "");
    }
  }
  return diverged ? kExitFailure : kExitOk;
}

}  // namespace pf::cli
