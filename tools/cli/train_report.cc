#include "tools/cli/train_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/execution/partition.h"
#include "tools/cli/progress.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {
namespace {

// The partition the run used: top-level layers per stage, the rank of each stage, and with
// --partition balanced the measured seconds of each top-level layer it was split by.
nlohmann::json partition_json(const Model& model, const exec::PipelineTrainer* pipeline,
                              const std::vector<double>& layer_seconds) {
  if (!pipeline) {
    return {{"layers_per_stage", {model.layers().size()}}, {"stage_ranks", {0}}};
  }
  nlohmann::json out = {{"layers_per_stage", exec::layer_counts(pipeline->parts().stages.ranges())},
                        {"stage_ranks", pipeline->schedule().placement.stage_to_rank}};
  if (!layer_seconds.empty()) out["layer_seconds"] = layer_seconds;
  return out;
}

}  // namespace

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

std::string join_numbers(const std::vector<int>& values, const char* separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) out += (i ? separator : "") + std::to_string(values[i]);
  return out;
}

void TrainTotals::add_step(const StepResult& r, const exec::PipelineTrainer* pipeline) {
  losses.push_back(r.loss);
  bubble_sum += r.bubble_rate;
  if (pipeline) {
    const exec::PipelineStats& stats = pipeline->last_stats();
    offloaded_bytes = static_cast<double>(stats.offloaded_bytes);
    for (int rank = 0; rank < ranks && rank < static_cast<int>(stats.ranks.size()); ++rank) {
      peak_versions[rank] = std::max(peak_versions[rank], stats.ranks[rank].peak_weight_versions);
      busy_us[rank] += stats.ranks[rank].busy_us;
      idle_us[rank] += stats.ranks[rank].idle_us;
      idle_share_sum[rank] += stats.ranks[rank].bubble_rate;
      sent_bytes[rank] = stats.ranks[rank].sent_bytes;
    }
  }
  for (size_t rank = 0; rank < r.peak_activation_bytes.size() && rank < peak_bytes.size(); ++rank)
    peak_bytes[rank] = std::max(peak_bytes[rank], static_cast<double>(r.peak_activation_bytes[rank]));
  tokens += r.tokens;
  seconds += r.seconds;
}

double TrainTotals::idle_share(int rank) const {
  const size_t r = static_cast<size_t>(rank);
  if (r >= idle_share_sum.size() || losses.empty()) return 0.0;
  return idle_share_sum[r] / static_cast<double>(losses.size());
}

void print_run_start(const TrainArgs& a, const Trainer& trainer, const std::string& resumed_from) {
  std::cerr << "pipeforge train: " << model_name(a) << ", " << trainer.model().num_distinct_parameter_elements()
            << " parameters, " << a.steps << " steps of " << a.batch_size << " rows in " << a.micro_batches
            << " micro-batch(es)"
            << (a.data_parallel > 1 ? " per replica, " + std::to_string(a.data_parallel) + " replicas" : "")
            << (a.tensor_parallel > 1 ? ", split over " + std::to_string(a.tensor_parallel) +
                                            " tensor-parallel processes"
                                      : "")
            << (resumed_from.empty() ? ""
                                     : ", resumed from " + resumed_from + " at step " +
                                           std::to_string(trainer.metrics().step))
            << "\n";
}

namespace {

// The layout and the last step's traffic of a neuron-group run.
nlohmann::json neuron_groups_json(const groups::NeuronGroupTrainer& trainer) {
  const groups::GroupNetwork& net = trainer.network();
  const groups::GroupTraffic& traffic = trainer.last_traffic();
  std::vector<int> layers;
  for (const auto& [begin, end] : net.ranges()) layers.push_back(end - begin);
  return {{"groups", net.groups()},
          {"stages", net.stages()},
          {"ranks", net.ranks()},
          {"layers_per_stage", layers},
          {"head", net.options().head},
          {"diversity_weight", net.options().diversity_weight},
          {"diversity_temperature", net.options().diversity_temperature},
          {"last_step_bytes",
           {{"stage_outputs", traffic.stage_outputs}, {"group_outputs", traffic.group_outputs},
            {"logits", traffic.logits}, {"gradients", 0}}}};
}

}  // namespace

void print_json_report(const TrainReport& r) {
  const TrainArgs& a = r.args;
  const TrainTotals& t = r.totals;
  const Trainer& trainer = r.trainer;
  const exec::PipelineTrainer* pipeline = r.pipeline;
  nlohmann::json out;
  out["model"] = !a.model_file.empty() || !a.model_json.empty() ? "json" : a.model;
  if (!a.model_file.empty()) out["model_file"] = a.model_file;
  out["config"] = r.model_description;
  out["num_parameters"] = trainer.model().num_distinct_parameter_elements();
  out["steps"] = trainer.metrics().step;
  out["steps_run"] = static_cast<int64_t>(t.losses.size());
  out["diverged"] = t.diverged;
  if (t.diverged) out["divergence"] = t.divergence;
  out["resumed_from_step"] = t.first_step;
  if (!r.resumed_from.empty()) out["resumed_from"] = r.resumed_from;
  out["lr_schedule"] = lr_schedule(a).to_json();
  out["last_lr"] = trainer.optimizer().config().lr;
  out["evaluations"] = t.evaluations;
  out["checkpoints"] = t.checkpoints;
  out["partition"] = partition_json(trainer.model(), pipeline, r.layer_seconds);
  out["micro_batches"] = a.micro_batches;
  out["batch_size"] = a.batch_size;
  out["seed"] = a.seed;
  out["optimizer"] = trainer.optimizer().config().to_json();
  out["loss"] = finite_or_null(t.losses.back());
  out["first_loss"] = finite_or_null(t.losses.front());
  nlohmann::json all = nlohmann::json::array();
  for (double l : t.losses) all.push_back(finite_or_null(l));
  out["losses"] = all;
  out["tokens"] = t.tokens;
  out["seconds"] = t.seconds;
  out["tokens_per_s"] = t.tokens_per_s();
  out["data_position"] = trainer.metrics().data_position;
  out["param_checksum"] = t.checksum;
  out["schedule"] = pipeline ? pipeline->schedule().name : r.groups ? a.schedule : "sequential";
  if (r.groups) out["neuron_groups"] = neuron_groups_json(*r.groups);
  out["stages"] = t.ranks;
  // Measured, mean over the steps run (0 for sequential): the busiest rank's idle share of each
  // step's makespan. Every rank's own share is in "ranks".
  out["bubble_rate"] = pipeline ? t.bubble_sum / static_cast<double>(t.losses.size()) : 0.0;
  out["bubble_rate_measures"] = "the busiest rank's idle share of each step's makespan, mean over the steps";
  nlohmann::json ranks = nlohmann::json::array();
  if (pipeline) {
    for (int rank = 0; rank < t.ranks; ++rank) {
      ranks.push_back({{"rank", rank},
                       {"busy_seconds", t.busy_us[static_cast<size_t>(rank)] * 1e-6},
                       {"idle_seconds", t.idle_us[static_cast<size_t>(rank)] * 1e-6},
                       {"idle_share", t.idle_share(rank)},
                       {"sent_bytes_per_step", t.sent_bytes[static_cast<size_t>(rank)]}});
    }
  }
  out["ranks"] = ranks;
  if (pipeline && pipeline->options().fill_job) {
    nlohmann::json fill = pipeline->options().fill_job->report();
    fill["fill_seconds_per_step"] = fill["fill_seconds"].get<double>() / static_cast<double>(t.losses.size());
    out["fill"] = fill;
  }
  out["peak_activation_bytes"] = t.peak_bytes;
  out["activation_policy"] = a.activation_policy;
  out["offloaded_bytes_per_step"] = t.offloaded_bytes;  // of the last step
  out["processes"] = r.world ? r.world->size() : 1;
  out["data_parallel"] = a.data_parallel;
  out["gradient_reduction"] = a.gradient_reduction;
  out["tensor_parallel"] = a.tensor_parallel;
  out["tensor_reduction"] = a.tensor_reduction;
  out["sequence_parallel"] = a.sequence_parallel;
  out["tensor_parallel_overlap"] = a.tensor_parallel_overlap;
  if (const auto& group = r.trainer.model().tensor_parallel_group()) {
    // What each member put into the group's all-reduces, per step of this run (evaluations included).
    const double steps = std::max<double>(1.0, static_cast<double>(t.losses.size()));
    out["tensor_parallel_bytes_per_step"] = static_cast<double>(group->reduced_bytes()) / steps;
    // And what it put into the group's all-gathers (the pipeline's slice messages, the loss's sums).
    out["tensor_parallel_gathered_bytes_per_step"] = static_cast<double>(group->gathered_bytes()) / steps;
    // And the partial tensors it put into reduce-scatters (sequence parallelism).
    out["tensor_parallel_reduce_scattered_bytes_per_step"] = static_cast<double>(group->scattered_bytes()) / steps;
    // Of the all-reduces, those that ran while weight gradients computed (B's, in a fused backward).
    out["tensor_parallel_overlapped_bytes_per_step"] = static_cast<double>(group->overlapped_bytes()) / steps;
  }
  out["process_memory"] = t.memory;  // per process: its stages' parameters, gradients, optimizer state
  out["asynchronous"] = pipeline != nullptr && pipeline->plan().schedule.traits.asynchronous();
  out["local_learning"] = r.groups != nullptr || (pipeline != nullptr && pipeline->plan().schedule.traits.local_learning());
  if (out["asynchronous"].get<bool>()) out["peak_weight_versions"] = t.peak_versions;
  if (pipeline && pipeline->options().overlap_steps) {
    // This process's ranks: how often one began a step while another rank still finished the last.
    out["overlap_steps"] = {{"steps_begun_early", pipeline->steps_begun_early()}};
  }
  if (r.adaptive) out["adaptations"] = plan::adaptations_to_json(r.adaptive->adaptations());
  if (t.saved) out["checkpoint"] = a.checkpoint;
  if (a.plan_step_seconds > 0) {
    out["plan_step_seconds"] = {{"predicted", a.plan_step_seconds}, {"measured", t.mean_step_seconds()}};
  }
  std::cout << out.dump() << std::endl;
}

namespace {

// The pipeline's lines of the summary.
void print_pipeline_summary(const TrainReport& r) {
  const TrainArgs& a = r.args;
  const TrainTotals& t = r.totals;
  const exec::PipelineTrainer& p = *r.pipeline;
  const std::string where = !r.world ? "threads of one process"
                            : a.data_parallel > 1
                                ? std::to_string(a.data_parallel) + " replicas, " + std::to_string(r.world->size()) +
                                      " processes"
                                : "one process each";
  std::printf("%s on %d ranks (%s): measured bubble rate %.4f (the busiest rank's idle share, mean over the steps)\n",
              p.schedule().name.c_str(), t.ranks, where.c_str(), t.bubble_sum / static_cast<double>(t.losses.size()));
  std::string shares;
  for (int rank = 0; rank < t.ranks; ++rank) {
    char part[48];
    std::snprintf(part, sizeof(part), "%s%d: %.0f%%", rank ? ", " : "", rank, 100.0 * t.idle_share(rank));
    shares += part;
  }
  std::printf("idle share of the step per rank: %s\n", shares.c_str());
  std::printf("partition: %s top-level layers per stage (stages on ranks %s)\n",
              join_numbers(exec::layer_counts(p.parts().stages.ranges())).c_str(),
              join_numbers(p.schedule().placement.stage_to_rank, ", ").c_str());
  if (const FillJob* fill = p.options().fill_job.get()) {
    const nlohmann::json report = fill->report();
    const double per_step = report["fill_seconds"].get<double>() / static_cast<double>(t.losses.size());
    const std::string summary = fill->summary(report);
    const size_t end = std::min(summary.find('\n'), summary.size());
    std::printf("fill: %s, %.3g ms of fill work per step\n", summary.substr(0, end).c_str(), 1e3 * per_step);
    for (size_t at = end; at < summary.size();) {  // the detail lines, indented under the first
      const size_t next = std::min(summary.find('\n', at + 1), summary.size());
      std::printf("      %s\n", summary.substr(at + 1, next - at - 1).c_str());
      at = next;
    }
  }
  if (p.plan().schedule.traits.local_learning())
    std::printf("local learning: every stage but the last trains on its own %s head; no gradient crosses ranks\n",
                a.local_head.c_str());
  if (p.plan().schedule.traits.asynchronous()) {
    std::string versions;
    for (int rank = 0; rank < t.ranks; ++rank)
      versions += (rank ? ", " : "") + std::to_string(t.peak_versions[static_cast<size_t>(rank)]);
    std::printf("asynchronous: no flush between steps, drained once at the end; weight versions per rank: %s\n",
                versions.c_str());
  }
}


// The neuron groups' lines of the summary.
void print_neuron_group_summary(const TrainReport& r) {
  const groups::GroupNetwork& net = r.groups->network();
  const groups::GroupTraffic& traffic = r.groups->last_traffic();
  std::vector<int> layers;
  for (const auto& [begin, end] : net.ranges()) layers.push_back(end - begin);
  std::printf("%s with neuron groups on %d ranks (%s): %d stages of %s top-level layers\n", r.args.schedule.c_str(),
              net.ranks(), r.groups->processes() ? "one process each" : "threads of one process", net.stages(),
              join_numbers(layers).c_str());
  std::printf("every stage but the last: %d width groups with their own %s heads; no gradient crosses ranks\n",
              net.groups(), net.options().head.c_str());
  std::printf("across ranks in the last step: %.1f kB of stage outputs, %.1f kB between groups, %.1f kB of logits\n",
              traffic.stage_outputs / 1e3, traffic.group_outputs / 1e3, traffic.logits / 1e3);
}

}  // namespace

void print_summary(const TrainReport& r) {
  const TrainArgs& a = r.args;
  const TrainTotals& t = r.totals;
  std::printf("final loss %.6f (step %lld: %.6f) after %lld steps, %s tokens/s\n", t.losses.back(),
              static_cast<long long>(t.first_step + 1), t.losses.front(),
              static_cast<long long>(r.trainer.metrics().step), ProgressBar::format_rate(t.tokens_per_s()).c_str());
  // Under tensor parallelism the checksum is of the whole model, its split parameters gathered.
  std::printf("parameter checksum (sha256)%s: %s\n",
              r.trainer.model().tensor_parallel_group() ? " of the whole model (split parameters gathered)" : "",
              t.checksum.c_str());
  if (r.pipeline) print_pipeline_summary(r);
  if (r.groups) print_neuron_group_summary(r);
  if (r.world) {
    std::string line;
    for (const auto& m : t.memory) {
      const double mb = (m["parameter_bytes"].get<double>() + m["gradient_bytes"].get<double>() +
                         m["optimizer_bytes"].get<double>()) / 1e6;
      char part[64];
      std::snprintf(part, sizeof(part), "%srank %d %.2f MB", line.empty() ? "" : ", ", m["rank"].get<int>(), mb);
      line += part;
    }
    std::printf("parameters + gradients + optimizer state per process: %s\n", line.c_str());
  }
  if (a.plan_step_seconds > 0 && t.mean_step_seconds() > 0) {
    std::printf("step time: measured %.4g s (mean over the steps), the plan predicted %.4g s (measured / predicted %.2f)\n",
                t.mean_step_seconds(), a.plan_step_seconds, t.mean_step_seconds() / a.plan_step_seconds);
  }
  if (t.saved) {
    std::printf("checkpoint saved to %s%s\n", a.checkpoint.c_str(),
                r.world ? " (a folder: one shard per pipeline rank and manifest.json)" : "");
  }
}

void warn_idle_ranks(const TrainReport& r) {
  const TrainTotals& t = r.totals;
  if (!r.pipeline || t.ranks < 2 || t.busy_us.empty()) return;
  int idlest = 0, busiest = 0;
  for (int rank = 1; rank < t.ranks; ++rank) {
    if (t.idle_share(rank) > t.idle_share(idlest)) idlest = rank;
    if (t.idle_share(rank) < t.idle_share(busiest)) busiest = rank;
  }
  // Lopsided: one rank waits most of the step while another is kept busy.
  if (t.idle_share(idlest) < 0.5 || t.idle_share(busiest) > 0.25) return;
  const std::vector<int> layers = exec::layer_counts(r.pipeline->parts().stages.ranges());
  const std::vector<int>& stage_rank = r.pipeline->schedule().placement.stage_to_rank;
  int held = 0;
  for (size_t s = 0; s < layers.size() && s < stage_rank.size(); ++s) held += stage_rank[s] == idlest ? layers[s] : 0;
  std::fflush(stdout);  // after the summary it follows
  std::fprintf(stderr,
               "pipeforge train: warning: rank %d was idle %.0f%% of the step (it holds %d top-level layer%s) "
               "while rank %d was idle %.0f%%; the headline bubble rate counts the busiest rank only. To spread "
               "the work: more --layers (a stage holds whole top-level layers, and the embedding and the head weigh "
               "little), %s, or fewer --stages\n",
               idlest, 100.0 * t.idle_share(idlest), held, held == 1 ? "" : "s", busiest,
               100.0 * t.idle_share(busiest),
               r.args.partition == "balanced" ? "--layers-per-stage" : "--partition balanced (split by measured times)");
}

}  // namespace pf::cli
