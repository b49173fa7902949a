// Bubble filling, measured: GPT (d_model 128, 6 blocks, sequence 64), 1F1B on 2 ranks, 4
// micro-batches of 8 rows, with and without a fill job in its bubbles, the two trainers' steps
// alternated on the same data. The fill job (--job): "evaluation", forward passes of a GPT of
// d_model 64, 2 blocks, on held-out micro-batches of 2 rows; or "sweep", a packed MLP sweep
// (runtime/sweep: 96 MLPs of hidden 8-64 on 64 synthetic features, batches of 32 rows, one shard
// per rank). One JSON object: the main job's step time with and without the fill (median of the
// steps after the first two), the slowdown (the median over those steps of each filled step's
// time over the plain step just before it, less 1: pairs taken back to back see the same machine,
// which a ratio of the two medians on a shared, noisy machine does not), the fill work per step,
// and the bubble the timeline measured.
//   bazel run -c opt //bench/planner:bubble_fill_bench [-- --job sweep --steps 30 --safety 0.65]
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/planner/bench_gpt.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/planner/bubble_fill.h"
#include "runtime/sweep/sweep_fill.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  double safety = 0.65;
  std::string job = "evaluation";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--safety") == 0) safety = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--job") == 0) job = argv[i + 1];
  }
  if (job != "evaluation" && job != "sweep") {
    std::cerr << "--job must be evaluation or sweep, got " << job << "\n";
    return 2;
  }
  using namespace pf;
  constexpr int m = 4;
  const bench::BenchGpt main_job = bench::bench_gpt(steps, m);
  const GptConfig& main_model = main_job.config;
  const std::vector<Batch>& batches = main_job.batches;
  std::unique_ptr<CharTextDataset> held = main_job.text->with_split(CharTextOptions::Split::kHeldOut);
  GptConfig fill_model = main_model;
  fill_model.d_model = 64;
  fill_model.layers = 2;
  std::vector<Batch> held_out;
  for (int i = 0; i < 4; ++i) held_out.push_back(held->next().micro_batch(0, 16));  // 2 rows each

  exec::PipelineOptions options;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.base.micro_batches = m;
  exec::PipelineTrainer plain(build_gpt(main_model), options);
  plan::EvaluationFill fill([&] { return build_gpt(fill_model); }, held_out, 2);
  sweep::SweepSpec grid;
  grid.features = 64;
  grid.classes = 10;
  grid.samples = 4000;
  grid.hidden = {8, 16, 32, 64};
  grid.activations = {"relu", "gelu", "tanh"};
  grid.lr = {1e-2, 3e-3};
  grid.repeats = 4;
  grid.epochs = 1000;  // more work than the bubbles take: the sweep never runs out
  sweep::SweepFill sweep_fill(grid, 2);
  exec::PipelineOptions filled_options = options;
  if (job == "sweep")
    filled_options.bubble_fill = [&sweep_fill](int rank, double seconds) { return sweep_fill.run(rank, seconds); };
  else
    filled_options.bubble_fill = [&fill](int rank, double seconds) { return fill.run(rank, seconds); };
  filled_options.bubble_fill_safety = safety;
  exec::PipelineTrainer filled(build_gpt(main_model), filled_options);

  std::vector<double> t_plain, t_filled, bubble, ratios;
  int64_t passes_before = 0, samples_before = 0;
  for (int s = 0; s < steps; ++s) {
    const double a = plain.step(batches[s]).seconds;
    if (s == 2) {
      passes_before = job == "sweep" ? sweep_fill.sweep().steps_taken() : fill.passes();
      samples_before = job == "sweep" ? sweep_fill.sweep().model_steps() : fill.samples();
    }
    const double b = filled.step(batches[s]).seconds;
    if (s < 2) continue;
    t_plain.push_back(a);
    t_filled.push_back(b);
    ratios.push_back(b / a);
    bubble.push_back(plain.last_stats().bubble_rate);
  }
  const int measured = steps - 2;
  const double fill_seconds = static_cast<double>(measured) * median(t_filled);
  nlohmann::json out = {
      {"main_job", "gpt d_model 128, 6 blocks, seq 64, 4 micro-batches of 8 rows, 1f1b on 2 ranks"},
      {"safety", safety},
      {"steps_measured", measured},
      {"step_seconds_without_fill", median(t_plain)},
      {"step_seconds_with_fill", median(t_filled)},
      {"slowdown", median(ratios) - 1},
      {"slowdown_of_medians", median(t_filled) / median(t_plain) - 1},
      {"measured_bubble_rate", median(bubble)}};
  if (job == "sweep") {
    out["fill_job"] = "packed MLP sweep: " + std::to_string(sweep_fill.sweep().models()) +
                      " MLPs (hidden 8-64, relu/gelu/tanh, 2 learning rates) on 64 features, batches of 32 rows";
    out["fill_sweep_steps_per_step"] = static_cast<double>(sweep_fill.sweep().steps_taken() - passes_before) / measured;
    out["fill_model_steps_per_step"] = static_cast<double>(sweep_fill.sweep().model_steps() - samples_before) / measured;
    out["fill_model_steps_per_second"] =
        static_cast<double>(sweep_fill.sweep().model_steps() - samples_before) / fill_seconds;
    out["fill_seconds_per_step"] = sweep_fill.report()["fill_seconds"].get<double>() / steps;
  } else {
    out["fill_job"] = "forward passes of gpt d_model 64, 2 blocks on held-out micro-batches of 2 rows";
    out["fill_passes_per_step"] = static_cast<double>(fill.passes() - passes_before) / measured;
    out["fill_samples_per_second"] = static_cast<double>(fill.samples() - samples_before) / fill_seconds;
    out["fill_mean_loss"] = fill.mean_loss();
  }
  std::cout << out.dump(1) << std::endl;
  return 0;
}
