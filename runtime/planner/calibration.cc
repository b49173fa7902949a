#include "runtime/planner/calibration.h"

#include <algorithm>
#include <memory>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/median.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/planner/overhead_fit.h"
#include "runtime/train/sequential_trainer.h"

namespace pf::plan {
namespace {

constexpr int kMicroBatches = 4;
constexpr int kMostMicroBatches = 16;  // the pipelined runs' largest m

// Per micro-batch size of `runs` (rows, measured busy, profiled busy): measured over profiled,
// divided by `overall`, ascending rows.
template <typename Run>
std::vector<Calibration::RowsScale> relative_scales(const std::vector<Run>& runs, double overall) {
  std::vector<Calibration::RowsScale> out;
  std::vector<int64_t> rows;
  for (const Run& r : runs) rows.push_back(r.rows);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  for (int64_t n : rows) {
    double busy = 0, profiled = 0;
    for (const Run& r : runs) {
      if (r.rows != n) continue;
      busy += r.busy;
      profiled += r.profiled_busy;
    }
    if (profiled > 0 && overall > 0) out.push_back({n, std::clamp(busy / profiled / overall, 0.1, 100.0)});
  }
  return out;
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
  const bool pipelined = request.cluster.devices() >= 2 && raw.profile.num_layers() >= 2;

  // Pipelined runs on 2 ranks: 1F1B, whose every hand-off crosses ranks, and ZB-V, whose middle
  // hand-off stays on its rank, each with 2, 4, 8 and 16 micro-batches (those that split the batch,
  // up to the plan's most). Their makespans differ in the number of actions and of cross-rank
  // dependencies on the critical path, which separates the per-action overhead from the
  // per-transfer one and from the per-step one (overhead_fit.h); their micro-batch sizes give the
  // layer time scale per size (Calibration::relative_scale_by_rows), which the profile alone gets
  // wrong for small micro-batches.
  struct Run {
    Candidate candidate;
    std::unique_ptr<exec::PipelineTrainer> trainer;
    std::vector<double> step_s, makespan_s, busy_s;
    double makespan = 0, busy = 0, step = 0, profiled_busy = 0;
    int64_t rows = 0;  // per micro-batch
  };
  std::vector<Run> runs;
  auto add_run = [&](const std::string& schedule, int micro_batches) {
    Run out;
    out.candidate.schedule = schedule;
    out.candidate.ranks = 2;
    out.candidate.micro_batches = micro_batches;
    out.candidate.layers_per_stage = predict(raw, out.candidate).candidate.layers_per_stage;
    exec::PipelineOptions options;
    options.base = base;
    options.base.micro_batches = micro_batches;
    options.schedule = schedule;
    options.ranks = 2;
    options.layers_per_stage = out.candidate.layers_per_stage;
    out.trainer = std::make_unique<exec::PipelineTrainer>(model, options);
    // Every stage runs F, B and W once per micro-batch: the profiled busy time of the whole step.
    out.rows = step_batch.rows() / micro_batches;
    const MicroBatchCosts costs = raw.profile.at_rows(out.rows);
    for (const LayerCosts& l : costs.layers) out.profiled_busy += l.forward_s + l.backward_input_s + l.backward_weight_s;
    out.profiled_busy *= micro_batches;
    runs.push_back(std::move(out));
  };
  if (pipelined) {
    const int most = std::max(kMicroBatches, request.max_micro_batches);
    for (int m = kMicroBatches / 2; m <= std::min(most, kMostMicroBatches); m *= 2) {
      if (step_batch.rows() % m != 0) continue;
      add_run("1f1b", m);
      if (raw.profile.num_layers() >= 4) add_run("zb-v", m);  // ZB-V has 4 stages on 2 ranks
    }
  }
  // The trainers share the model's parameters (the values do not matter here) and step in turn,
  // one step each per round, so that a neighbour's burst of load hits every run alike; the first
  // round is a warm-up. The medians of the rounds count.
  Candidate sequential;
  sequential.micro_batches = kMicroBatches;
  const Prediction sequential_predicted = predict(raw, sequential);
  SequentialTrainer sequential_trainer(model, base);
  std::vector<double> sequential_s;
  for (int s = 0; s <= steps; ++s) {
    const double t = sequential_trainer.step(step_batch).seconds;
    if (s > 0) sequential_s.push_back(t);
    for (Run& r : runs) {
      const double step = r.trainer->step(step_batch).seconds;
      if (s == 0) continue;
      const exec::PipelineStats& stats = r.trainer->last_stats();
      r.step_s.push_back(step);
      r.makespan_s.push_back(stats.makespan_us * 1e-6);
      double busy = 0;
      for (const exec::RankStats& rank : stats.ranks) busy += rank.busy_us * 1e-6;
      r.busy_s.push_back(busy);
    }
  }
  // A scale rather than a constant: on a shared machine what the sequential trainer's step adds
  // to its profile is mostly the load of the moment, which scales its passes.
  if (sequential_predicted.step_seconds > 0)
    k.sequential_compute_scale = std::clamp(median(sequential_s) / sequential_predicted.step_seconds, 0.1, 100.0);
  if (runs.empty()) return k;
  for (Run& r : runs) {
    r.makespan = median(r.makespan_s);
    r.busy = median(r.busy_s);
    r.step = median(r.step_s);
    r.trainer.reset();
  }
  double busy = 0, profiled = 0;
  for (const Run& r : runs) {
    busy += r.busy;
    profiled += r.profiled_busy;
  }
  if (profiled > 0) k.compute_scale = std::clamp(busy / profiled, 0.1, 100.0);
  k.relative_scale_by_rows = relative_scales(runs, k.compute_scale);
  PlanRequest scaled = raw;
  scaled.profile.calibration = k;
  std::vector<double> measured;
  double noise_variance = 0;  // of one run's median makespan: the mean over the runs
  for (const Run& r : runs) {
    measured.push_back(r.makespan);
    noise_variance += median_variance(r.makespan_s) / static_cast<double>(runs.size());
  }
  const OverheadFit fit = fit_overheads(
      measured,
      [&](int i, double per_action, double per_transfer) {
        scaled.profile.calibration.action_overhead_s = per_action;
        scaled.profile.calibration.transfer_overhead_s = per_transfer;
        return predict(scaled, runs[static_cast<size_t>(i)].candidate).pipeline_seconds;
      },
      noise_variance);
  k.action_overhead_s = fit.per_action_s;
  k.transfer_overhead_s = fit.per_transfer_s;
  // The per-step constant of the fit, and the step beyond the makespan and the update (median).
  scaled.profile.calibration = k;
  std::vector<double> beyond;
  for (const Run& r : runs) beyond.push_back(std::max(0.0, r.step - r.makespan - predict(scaled, r.candidate).update_seconds));
  k.step_overhead_s = fit.per_step_s + median(beyond);
  return k;
}

double fit_process_compute_scale(const PlanRequest& request, const Candidate& candidate, double measured_step_s) {
  PF_CHECK_ARG(candidate.data_parallel > 1, "fit_process_compute_scale: a data-parallel candidate (D > 1) is needed");
  PlanRequest r = request;
  double lo = 0.1, hi = 100;
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);  // the scale is a ratio: bisect its logarithm
    r.profile.calibration.process_compute_scale = mid;
    (predict(r, candidate).step_seconds < measured_step_s ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

}  // namespace pf::plan
