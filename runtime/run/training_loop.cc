#include "runtime/run/training_loop.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/run/metrics_log.h"

namespace pf {

void TrainingLoopOptions::validate() const {
  const std::string& p = field_prefix;
  PF_CHECK_ARG(steps >= 0, p, "steps must be >= 0, got ", steps);
  PF_CHECK_ARG(eval_every >= 0, p, "eval_every must be >= 0 (0 = never), got ", eval_every);
  PF_CHECK_ARG(eval_micro_batches >= 1, p, "eval_micro_batches must be >= 1, got ", eval_micro_batches);
  PF_CHECK_ARG(checkpoint_every >= 0, p, "checkpoint_every must be >= 0 (0 = never), got ", checkpoint_every);
  PF_CHECK_ARG(checkpoint_every == 0 || !checkpoint_dir.empty(), p, "checkpoint_every ", checkpoint_every,
               " needs checkpoint_dir (the folder of the checkpoints)");
  PF_CHECK_ARG(keep_checkpoints >= 0, p, "keep_checkpoints must be >= 0 (0 = all), got ", keep_checkpoints);
}

namespace {

std::string number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// StepReport::divergence of the step just taken. Every process of a pipeline takes part in the
// one reduction (each holds only its ranks' parameters), so all of them give the same answer.
std::string divergence_of(const Trainer& trainer, const StepResult& result) {
  if (!std::isfinite(result.loss)) return "the loss is " + number(result.loss);
  if (!std::isfinite(result.grad_norm)) return "the gradient norm is " + number(result.grad_norm);
  const std::vector<Parameter*> all = trainer.model().parameters();
  std::unordered_map<const Parameter*, size_t> index;
  for (size_t i = 0; i < all.size(); ++i) index[all[i]] = i;
  // [model parameter]: 0 when every value is finite, else 1 + the index of the first NaN or
  // infinity (is_nan: 1 for a NaN); each parameter has one holder, so the sums are exact.
  std::vector<double> first_bad(all.size(), 0.0);
  std::vector<double> is_nan(all.size(), 0.0);
  for (Parameter* p : trainer.local_parameters()) {
    if (!p->allocated()) continue;
    const auto it = index.find(p);
    if (it == index.end()) continue;
    const int64_t at = first_non_finite(p->value);
    if (at < 0) continue;
    first_bad[it->second] = static_cast<double>(at) + 1.0;
    is_nan[it->second] = std::isnan(p->value.to_vector()[static_cast<size_t>(at)]) ? 1.0 : 0.0;
  }
  const ProcessGroups groups = trainer.process_groups();
  if (groups.pipeline != nullptr) {
    first_bad.insert(first_bad.end(), is_nan.begin(), is_nan.end());
    groups.pipeline->all_reduce_sum(first_bad.data(), first_bad.size(), groups.timeout_seconds);
    is_nan.assign(first_bad.begin() + static_cast<std::ptrdiff_t>(all.size()), first_bad.end());
    first_bad.resize(all.size());
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (first_bad[i] == 0.0) continue;
    return "parameter '" + all[i]->name + "' has " + (is_nan[i] > 0 ? "a NaN" : "an infinity") + " at element " +
           number(first_bad[i] - 1.0) + " after the update";
  }
  return "";
}

// How many steps from step `done` + 1 on run back to back: up to and including the next one that
// evaluates or saves a checkpoint, at most `left`.
int64_t back_to_back_steps(int64_t done, int64_t left, const TrainingLoopOptions& o) {
  int64_t n = left;
  for (int64_t every : {o.eval_every, o.checkpoint_every})
    if (every > 0) n = std::min(n, every - done % every);
  return std::max<int64_t>(n, 1);
}

}  // namespace

StepReport run_training(Trainer& trainer, DataSource& train, DataSource* held_out, const TrainingLoopOptions& o,
                        const std::function<bool(const StepReport&)>& on_step) {
  o.validate();
  PF_CHECK_ARG(o.eval_every == 0 || held_out != nullptr, "eval_every ", o.eval_every,
               " needs a held-out data source to evaluate on");
  const int64_t first_step = trainer.metrics().step;
  std::unique_ptr<MetricsLog> log;
  if (!o.metrics_log.empty() && o.writes_files) log = std::make_unique<MetricsLog>(o.metrics_log, first_step);
  std::unique_ptr<CheckpointSeries> series;
  if (o.checkpoint_every > 0)
    series = std::make_unique<CheckpointSeries>(o.checkpoint_dir, o.keep_checkpoints, o.sharded_checkpoints);

  StepReport report;
  report.step = first_step;
  // Back-to-back steps up to the next evaluation, checkpoint or the end (a trainer that overlaps
  // steps begins the next one early within them); a loop that stops early settles the trainer.
  struct Settle {
    Trainer& t;
    ~Settle() {
      try {
        t.expect_steps(0);
      } catch (const std::exception& e) {
        pf::log(LogLevel::kWarning, std::string("training loop: settling the trainer: ") + e.what());
      }
    }
  } settle{trainer};
  int64_t expected = 0;  // steps of the current back-to-back run still to call
  for (int64_t i = 1; i <= o.steps; ++i) {
    if (expected == 0) {
      expected = back_to_back_steps(first_step + i - 1, o.steps - i + 1, o);
      trainer.expect_steps(expected);
    }
    --expected;
    report = StepReport();
    report.result = trainer.step(train);
    report.step = trainer.metrics().step;
    report.divergence = divergence_of(trainer, report.result);
    report.stopped = i < o.steps && o.should_stop && o.should_stop(report);
    const bool last = i == o.steps;
    if (report.stopped) trainer.expect_steps(0);  // the checkpoint below sees no step begun ahead
    const bool finite = report.divergence.empty();
    if (finite && !report.stopped && o.eval_every > 0 && (report.step % o.eval_every == 0 || last)) {
      held_out->seek(0);
      report.eval = trainer.evaluate(*held_out, o.eval_micro_batches);
    }
    if (log) log->write(report.step, report.result, report.eval, o.log_fields ? o.log_fields(report.step) : nullptr);
    if (finite && series && (report.step % o.checkpoint_every == 0 || last || report.stopped)) {
      report.checkpoint = series->path_of(report.step);
      save_trainer_checkpoint(trainer, report.checkpoint);
      if (o.writes_files) series->prune();
    }
    const bool go_on = on_step ? on_step(report) : true;
    if (!go_on || !finite || report.stopped) break;
  }
  return report;
}

}  // namespace pf
