#include "runtime/planner/calibration.h"

#include <algorithm>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/train/sequential_trainer.h"

namespace pf::plan {
namespace {

constexpr int kMicroBatches = 4;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

Calibration calibrate(const PlanRequest& request, std::shared_ptr<Model> model, const Batch& step_batch,
                      const OptimizerConfig& optimizer, int steps) {
  PF_CHECK_ARG(steps >= 1, "calibration: steps must be >= 1, got ", steps);
  PF_CHECK_ARG(step_batch.rows() % kMicroBatches == 0, "calibration: the batch's ", step_batch.rows(),
               " rows do not split into ", kMicroBatches, " micro-batches");
  PlanRequest raw = request;
  raw.profile.calibration = Calibration();
  raw.batch_rows = step_batch.rows();
  raw.memory_limit_bytes = 1e300;
  Calibration k;
  k.measured = true;

  TrainerOptions base;
  base.micro_batches = kMicroBatches;
  base.optimizer = optimizer;
  {
    Candidate c;
    c.micro_batches = kMicroBatches;
    const Prediction predicted = predict(raw, c);
    SequentialTrainer trainer(model, base);
    std::vector<double> seconds;
    for (int s = 0; s <= steps; ++s) {
      const double t = trainer.step(step_batch).seconds;
      if (s > 0) seconds.push_back(t);
    }
    k.sequential_step_overhead_s = std::max(0.0, median(seconds) - predicted.step_seconds);
  }
  if (request.cluster.devices() < 2 || raw.profile.num_layers() < 2) return k;

  Candidate c;
  c.schedule = "1f1b";
  c.ranks = 2;
  c.micro_batches = kMicroBatches;
  const Prediction predicted = predict(raw, c);
  exec::PipelineOptions options;
  options.base = base;
  options.schedule = c.schedule;
  options.ranks = c.ranks;
  options.layers_per_stage = predicted.candidate.layers_per_stage;
  exec::PipelineTrainer trainer(model, options);
  std::vector<double> step_s, makespan_s, busy_s;
  for (int s = 0; s <= steps; ++s) {
    const double t = trainer.step(step_batch).seconds;
    if (s == 0) continue;
    const exec::PipelineStats& stats = trainer.last_stats();
    step_s.push_back(t);
    makespan_s.push_back(stats.makespan_us * 1e-6);
    double busy = 0;
    for (const exec::RankStats& r : stats.ranks) busy += r.busy_us * 1e-6;
    busy_s.push_back(busy);
  }
  // Every stage runs F, B and W once per micro-batch: the profiled busy time of the whole step.
  const MicroBatchCosts costs = raw.profile.at_rows(step_batch.rows() / kMicroBatches);
  double profiled = 0;
  for (const LayerCosts& l : costs.layers) profiled += l.forward_s + l.backward_input_s + l.backward_weight_s;
  profiled *= kMicroBatches;
  if (profiled > 0) k.compute_scale = std::clamp(median(busy_s) / profiled, 0.1, 100.0);
  // The hand-off cost per action that makes the simulated makespan the measured one (it grows
  // with the overhead, so bisection finds it).
  const double target = median(makespan_s);
  PlanRequest scaled = raw;
  scaled.profile.calibration = k;
  double lo = 0, hi = target;
  for (int i = 0; i < 40; ++i) {
    const double mid = (lo + hi) / 2;
    scaled.profile.calibration.action_overhead_s = mid;
    (predict(scaled, c).pipeline_seconds < target ? lo : hi) = mid;
  }
  k.action_overhead_s = lo;
  scaled.profile.calibration = k;
  const Prediction with = predict(scaled, c);
  k.step_overhead_s = std::max(0.0, median(step_s) - target - with.update_seconds);
  return k;
}

}  // namespace pf::plan
