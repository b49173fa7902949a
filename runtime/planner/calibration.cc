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

  // 1F1B on 2 ranks with 2 and with 4 micro-batches: the difference in makespan between them
  // comes from their difference in actions, which separates the per-action hand-off from the
  // per-step overhead.
  struct Run {
    Candidate candidate;
    double makespan = 0, busy = 0, step = 0, profiled_busy = 0;
  };
  auto run = [&](int micro_batches) {
    Run out;
    out.candidate.schedule = "1f1b";
    out.candidate.ranks = 2;
    out.candidate.micro_batches = micro_batches;
    const Prediction predicted = predict(raw, out.candidate);
    out.candidate.layers_per_stage = predicted.candidate.layers_per_stage;
    exec::PipelineOptions options;
    options.base = base;
    options.base.micro_batches = micro_batches;
    options.schedule = "1f1b";
    options.ranks = 2;
    options.layers_per_stage = out.candidate.layers_per_stage;
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
    out.makespan = median(makespan_s);
    out.busy = median(busy_s);
    out.step = median(step_s);
    // Every stage runs F, B and W once per micro-batch: the profiled busy time of the whole step.
    const MicroBatchCosts costs = raw.profile.at_rows(step_batch.rows() / micro_batches);
    for (const LayerCosts& l : costs.layers) out.profiled_busy += l.forward_s + l.backward_input_s + l.backward_weight_s;
    out.profiled_busy *= micro_batches;
    return out;
  };
  const Run few = run(kMicroBatches / 2), many = run(kMicroBatches);
  if (few.profiled_busy + many.profiled_busy > 0)
    k.compute_scale = std::clamp((few.busy + many.busy) / (few.profiled_busy + many.profiled_busy), 0.1, 100.0);
  PlanRequest scaled = raw;
  auto simulated = [&](const Run& r, double overhead) {
    scaled.profile.calibration = k;
    scaled.profile.calibration.action_overhead_s = overhead;
    return predict(scaled, r.candidate).pipeline_seconds;
  };
  // The overhead per action that makes the simulated difference the measured one (the difference
  // grows with it: the longer run has more actions on its critical path), by bisection.
  const double measured_gap = many.makespan - few.makespan;
  double lo = 0, hi = std::max(0.0, many.makespan);
  if (simulated(many, 0) - simulated(few, 0) < measured_gap) {
    for (int i = 0; i < 40; ++i) {
      const double mid = (lo + hi) / 2;
      (simulated(many, mid) - simulated(few, mid) < measured_gap ? lo : hi) = mid;
    }
  }
  k.action_overhead_s = lo;
  // What is left of the makespan, and the step beyond the makespan and the update: per step.
  scaled.profile.calibration = k;
  const Prediction with = predict(scaled, many.candidate);
  k.step_overhead_s = std::max(0.0, many.makespan - with.pipeline_seconds) +
                      std::max(0.0, many.step - many.makespan - with.update_seconds);
  return k;
}

}  // namespace pf::plan
