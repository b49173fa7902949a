// Bubble filling, measured: GPT (d_model 128, 6 blocks, sequence 64), 1F1B on 2 ranks, 4
// micro-batches of 8 rows, with and without a fill job in its bubbles (forward passes of a GPT of
// d_model 64, 2 blocks, on held-out micro-batches of 2 rows), the two trainers' steps alternated on
// the same data. One JSON object: the main job's step time with and without the fill (median of
// the steps after the first two), the slowdown, the fill passes and samples per step, and the
// bubble the timeline measured.
//   bazel run -c opt //bench/planner:bubble_fill_bench [-- --steps 30 --safety 0.65]
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/planner/bench_gpt.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/planner/bubble_fill.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  double safety = 0.65;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--safety") == 0) safety = std::atof(argv[i + 1]);
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
  exec::PipelineOptions filled_options = options;
  filled_options.bubble_fill = [&fill](int rank, double seconds) { return fill.run(rank, seconds); };
  filled_options.bubble_fill_safety = safety;
  exec::PipelineTrainer filled(build_gpt(main_model), filled_options);

  std::vector<double> t_plain, t_filled, bubble;
  int64_t passes_before = 0, samples_before = 0;
  for (int s = 0; s < steps; ++s) {
    const double a = plain.step(batches[s]).seconds;
    if (s == 2) {
      passes_before = fill.passes();
      samples_before = fill.samples();
    }
    const double b = filled.step(batches[s]).seconds;
    if (s < 2) continue;
    t_plain.push_back(a);
    t_filled.push_back(b);
    bubble.push_back(plain.last_stats().bubble_rate);
  }
  const int measured = steps - 2;
  const double fill_seconds = static_cast<double>(measured) * median(t_filled);
  const nlohmann::json out = {
      {"main_job", "gpt d_model 128, 6 blocks, seq 64, 4 micro-batches of 8 rows, 1f1b on 2 ranks"},
      {"fill_job", "forward passes of gpt d_model 64, 2 blocks on held-out micro-batches of 2 rows"},
      {"safety", safety},
      {"steps_measured", measured},
      {"step_seconds_without_fill", median(t_plain)},
      {"step_seconds_with_fill", median(t_filled)},
      {"slowdown", median(t_filled) / median(t_plain) - 1},
      {"measured_bubble_rate", median(bubble)},
      {"fill_passes_per_step", static_cast<double>(fill.passes() - passes_before) / measured},
      {"fill_samples_per_second", static_cast<double>(fill.samples() - samples_before) / fill_seconds},
      {"fill_mean_loss", fill.mean_loss()}};
  std::cout << out.dump(1) << std::endl;
  return 0;
}
