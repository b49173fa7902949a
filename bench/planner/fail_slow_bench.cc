// Fail-slow adaptation, measured: GPT (d_model 128, 6 blocks, sequence 64), 1F1B on 2 ranks, 4
// micro-batches of 8 rows, rank 1 slowed by --factor (default 2). Three trainers on the same data,
// their steps alternated: healthy (no slow rank), slowed without adaptation, and slowed with
// adaptation (AdaptiveTrainer). One JSON object: tokens/s of each before and after the move, the
// partitions, the measured speed-up and the predicted one (the bottleneck rank's predicted busy
// time before over after, from the layer profile and the measured slowdown).
//   bazel run -c opt //bench/planner:fail_slow_bench [-- --factor 2 --steps 12]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/planner/bench_gpt.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/planner/fail_slow.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double bottleneck(const std::vector<double>& busy, const std::vector<double>& slowdown) {
  double worst = 0;
  for (size_t r = 0; r < busy.size(); ++r) worst = std::max(worst, busy[r] * slowdown[r]);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  double factor = 2.0;
  int steps = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--factor") == 0) factor = std::atof(argv[i + 1]);
    else if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  using namespace pf;
  constexpr int m = 4;
  const bench::BenchGpt main_job = bench::bench_gpt(steps, m);
  const GptConfig& g = main_job.config;
  const std::vector<Batch>& batches = main_job.batches;

  exec::PipelineOptions options;
  options.schedule = "1f1b";
  options.ranks = 2;
  options.base.micro_batches = m;
  auto profiled = build_gpt(g);
  const plan::MicroBatchCosts costs = plan::measure_micro_batch(*profiled, batches[0].micro_batch(0, m), 3);

  exec::PipelineTrainer healthy(build_gpt(g), options);
  exec::PipelineOptions slow = options;
  slow.slow_rank = 1;
  slow.slow_factor = factor;
  exec::PipelineTrainer slowed(build_gpt(g), slow);
  plan::AdaptiveTrainer adaptive(build_gpt(g), slow, costs, plan::FailSlowOptions{1.3, 2});
  const std::vector<int> before = adaptive.layers_per_stage();

  std::vector<double> t_healthy, t_slowed, t_before, t_after;
  for (int s = 0; s < steps; ++s) {
    const double tokens = static_cast<double>(batches[s].targets.numel());
    t_healthy.push_back(tokens / healthy.step(batches[s]).seconds);
    t_slowed.push_back(tokens / slowed.step(batches[s]).seconds);
    const bool moved = !adaptive.adaptations().empty();
    const double t = tokens / adaptive.step(batches[s]).seconds;
    if (s == 0) continue;  // warm-up
    (moved ? t_after : t_before).push_back(t);
  }
  nlohmann::json out = {{"model", "gpt d_model 128, 6 blocks, seq 64, 4 micro-batches of 8 rows, 1f1b on 2 ranks"},
                        {"slow_rank", 1},
                        {"slow_factor", factor},
                        {"healthy_tokens_per_s", median(t_healthy)},
                        {"slowed_tokens_per_s", median(t_slowed)},
                        {"adaptive_before_tokens_per_s", median(t_before)},
                        {"adaptive_after_tokens_per_s", median(t_after)},
                        {"partition_before", before}};
  if (!adaptive.adaptations().empty()) {
    const plan::Adaptation& a = adaptive.adaptations().front();
    const sched::Schedule& schedule = adaptive.pipeline().schedule();
    const double predicted = bottleneck(plan::predicted_busy_per_rank(costs, schedule, a.from), a.slowdown) /
                             bottleneck(plan::predicted_busy_per_rank(costs, schedule, a.to), a.slowdown);
    out["moved_after_step"] = a.step;
    out["measured_slowdown"] = a.slowdown;
    out["partition_after"] = a.to;
    out["predicted_speedup"] = predicted;
    out["measured_speedup"] = median(t_after) / median(t_before);
    out["after_over_slowed"] = median(t_after) / median(t_slowed);
  } else {
    out["moved_after_step"] = nullptr;
  }
  std::cout << out.dump(1) << std::endl;
  return 0;
}
