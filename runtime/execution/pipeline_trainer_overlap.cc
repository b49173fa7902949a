// PipelineTrainer with overlapping steps (TrainingConfig::overlap_steps; step_overlap.h): a run of
// back-to-back steps is one job on the workers. Each call commits its step (the update may apply),
// hands the ranks the next step's micro-batches when more calls follow, and returns once every local
// rank has updated for its step — while the ranks that finished early already run the next one.
// Every rank applies its own update after its own last gradient action, in the order the barrier
// would have used, so the parameters after every step are those of the barrier, bit for bit.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/train/micro_batches.h"

namespace pf::exec {
namespace {

using clock_type = std::chrono::steady_clock;

double micros_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

void PipelineTrainer::expect_steps(int64_t steps) {
  PF_CHECK_ARG(steps >= 0, "expect_steps: steps must be >= 0, got ", steps);
  expected_steps_ = steps;
  if (steps == 0 && overlaps()) settle();
}

std::unique_ptr<StepOverlap::Step> PipelineTrainer::pull_overlapped_step(DataSource& source, int64_t number) {
  const TrainingConfig& c = plan_.config;
  auto s = std::make_unique<StepOverlap::Step>();
  s->number = number;
  s->source_start = source.position();
  std::vector<Batch> micro = pull_micro_batches(*model_, source, c.base.step_micro_batches());
  for (const Batch& b : micro) {
    s->samples += b.rows();
    s->tokens += b.targets.numel();
  }
  // Sequence slices: the executors run one unit (micro-batch slice) per schedule micro-batch number.
  s->micro = c.seq_slices > 1 ? split_into_sequence_slices(micro, c.seq_slices) : std::move(micro);
  s->outputs.assign(static_cast<size_t>(plan_.schedule.num_ranks()), RankExecutor::StepOutput());
  s->t0 = clock_type::now();
  return s;
}

void PipelineTrainer::overlapped_worker(int rank, int64_t first) {
  RankExecutor& executor = *executors_[static_cast<size_t>(rank)];
  comm::Transport& endpoint = group_->endpoint(rank);
  auto cancelled = [this] { return group_->cause(); };
  for (int64_t n = first;; ++n) {
    StepOverlap::Step* s = overlap_->next(n);
    if (s == nullptr) return;  // the run ended (or was abandoned) before step n
    RankExecutor::StepOutput* out = &s->outputs[static_cast<size_t>(rank)];
    executor.run_step(s->micro, s->t0, endpoint, memory_.store(rank), cancelled, out);
    optimizer_.after_rank_actions(rank, out->stats, n);  // clipping: this rank's squared norms
    overlap_->gradients_final(*s);
    if (!overlap_->wait_committed(*s)) return;  // a step begun ahead and abandoned: no update
    optimizer_.update_rank(rank, s->keep, out->stats);
    overlap_->updated(*s);
  }
}

StepResult PipelineTrainer::overlapped_step(DataSource& source) {
  try {
    return run_overlapped_step(source);
  } catch (...) {
    // What failed on this thread (a collective of the report, the source) ends the run too, so
    // that no worker is left in it; a failure the run's own handling met has ended it already.
    if (pool_->started()) {
      overlap_->abandon();
      group_->rank_failed(local_ranks(plan_, ownership_).front(), describe_exception(std::current_exception()));
      pool_->wait();
      overlap_->clear();
      overlap_source_ = nullptr;
      group_->reset();
    }
    throw;
  }
}

StepResult PipelineTrainer::run_overlapped_step(DataSource& source) {
  PF_CHECK_STATE(unusable_.empty(), unusable_);
  const auto start = clock_type::now();
  const TrainingConfig& c = plan_.config;
  const int64_t k = report_.metrics().step;
  StepOverlap::Step* s = overlap_->front();
  if (s != nullptr && (overlap_source_ != &source || s->number != k)) {
    settle();  // another source, or the step count moved: what was begun ahead does not apply
    s = nullptr;
  }
  if (s == nullptr) {  // a run begins
    overlap_source_ = &source;
    start_run(pull_overlapped_step(source, k));
    s = overlap_->front();
  }
  const bool ahead = expected_steps_ > 1;
  expected_steps_ = std::max<int64_t>(0, expected_steps_ - 1);
  StepResult result;
  result.lr = c.base.lr_at(k);
  optimizer_.begin_overlapped_update(result.lr);
  // With clipping the norm is known only when every rank's gradients are: the ranks update
  // optimistically, keeping what they change, and the norm validates the update afterwards.
  const bool clipping = c.base.optimizer.clip_norm > 0.0f;
  overlap_->commit(*s, clipping);
  // The next step's micro-batches, so that the ranks done with this one go on.
  bool pushed = false;
  if (ahead) {
    const int64_t position = source.position();
    try {
      overlap_->push(pull_overlapped_step(source, k + 1));
      pushed = true;
    } catch (const std::exception& e) {  // the next call pulls again and reports it
      rewind_after_failure(source, position);
      log(LogLevel::kDebug, std::string("overlapped steps: the next step's micro-batches: ") + e.what());
    }
  }
  if (!pushed) overlap_->end_after(k);
  float scale = 1.0f;
  if (clipping) {
    if (!overlap_->wait_gradients_final(*s)) fail_overlapped_run();
    try {
      result.grad_norm = optimizer_.overlapped_norm(k, &scale);
    } catch (...) {
      group_->rank_failed(local_ranks(plan_, ownership_).front(), describe_exception(std::current_exception()));
      fail_overlapped_run();
    }
  }
  if (!overlap_->wait_updated(*s)) fail_overlapped_run();
  const auto updated = clock_type::now();
  // Every local rank has updated for step k; the early ones already run step k + 1.
  std::vector<RankExecutor::StepOutput> outputs = std::move(s->outputs);
  const int units = static_cast<int>(s->micro.size());
  result.samples = s->samples;
  result.tokens = s->tokens;
  if (clipping && (scale != 1.0f || !std::isfinite(result.grad_norm))) {
    roll_back(scale);  // step k's update as the barrier would have applied it; step k + 1 again
    report_.metrics().data_position = pushed ? overlap_->front()->source_start : source.position();
  } else if (pushed) {
    overlap_->pop_front();
    report_.metrics().data_position = overlap_->front()->source_start;
  } else {
    const std::exception_ptr error = pool_->wait();
    overlap_->clear();
    overlap_source_ = nullptr;
    if (error) fail_step(error);
    report_.metrics().data_position = source.position();
  }
  const std::vector<float> losses = report_.losses(outputs, schedule(), units);
  for (float loss : losses) result.loss += loss;  // in micro-batch order, as the barrier sums them
  const auto end = clock_type::now();
  result.seconds = std::chrono::duration<double>(end - start).count();
  report_.collect(outputs, std::vector<mem::StoreStats>(static_cast<size_t>(plan_.schedule.num_ranks())),
                  micros_between(start, end));
  result.bubble_rate = report_.stats().bubble_rate;
  for (const RankStats& rs : report_.stats().ranks)
    result.peak_activation_bytes.push_back(static_cast<int64_t>(rs.peak_activation_bytes));
  report_.finish(result, micros_between(start, end), micros_between(updated, end), true);
  return result;
}

void PipelineTrainer::start_run(std::unique_ptr<StepOverlap::Step> first) {
  group_->reset();
  memory_.reset_stats();
  devices_->zero_gradients(ownership_.local(), ownership_.local_copies());
  const int64_t k = first->number;
  first->t0 = clock_type::now();
  overlap_->push(std::move(first));
  pool_->start([this, k](int rank) {
    const auto scopes = devices_->enter(rank);
    overlapped_worker(rank, k);
  });
}

std::exception_ptr PipelineTrainer::stop_run() {
  if (!pool_->started()) return nullptr;
  overlap_->abandon();
  const bool threads = plan_.placement == RankPlacement::kThreads;
  if (threads && !group_->cancelled())
    group_->rank_failed(local_ranks(plan_, ownership_).front(), "overlapped steps: the step begun ahead is abandoned");
  std::exception_ptr error = pool_->wait();
  overlap_->clear();
  if (threads) {
    group_->reset();
    error = nullptr;
  }
  return error;
}

void PipelineTrainer::roll_back(float scale) {
  std::unique_ptr<StepOverlap::Step> again;
  if (overlap_->in_flight() > 1) {
    const StepOverlap::Step& ahead = *overlap_->back();
    again = std::make_unique<StepOverlap::Step>();
    again->number = ahead.number;
    again->micro = ahead.micro;
    again->source_start = ahead.source_start;
    again->samples = ahead.samples;
    again->tokens = ahead.tokens;
    again->outputs.assign(ahead.outputs.size(), RankExecutor::StepOutput());
  }
  if (std::exception_ptr error = stop_run()) fail_step(error);
  if (std::exception_ptr error = run_workers([&](int rank) { optimizer_.redo_update(rank, scale); }))
    fail_step(error);
  ++rollbacks_;
  if (again) start_run(std::move(again));
}

void PipelineTrainer::settle(bool rewind) {
  if (!overlaps() || !pool_->started()) return;
  const StepOverlap::Step* ahead = overlap_->back();
  const int64_t rewind_to = ahead ? ahead->source_start : -1;
  const std::exception_ptr error = stop_run();
  if (rewind && overlap_source_ && rewind_to >= 0) rewind_after_failure(*overlap_source_, rewind_to);
  overlap_source_ = nullptr;
  // The abandoned step's gradients go; its update never applied.
  devices_->zero_gradients(ownership_.local(), ownership_.local_copies());
  if (error) fail_step(error);
}

void PipelineTrainer::fail_overlapped_run() {
  const StepOverlap::Step* s = overlap_->front();
  const int64_t rewind_to = s ? s->source_start : -1;
  const bool partly_updated = s && s->updated > 0;
  overlap_->abandon();
  std::exception_ptr error = pool_->wait();
  overlap_->clear();
  if (overlap_source_ && rewind_to >= 0) rewind_after_failure(*overlap_source_, rewind_to);
  overlap_source_ = nullptr;
  if (!error)
    error = std::make_exception_ptr(Error(ErrorCode::kCancelled, "overlapped step: stopped: " + group_->cause()));
  // Ranks that had updated for the failed step keep it: training on would apply it twice there.
  if (partly_updated)
    unusable_ = "pipeline trainer: an overlapped step failed after some ranks had applied its update, so the "
                "parameters mix two steps; load a checkpoint to go on (the failure: " +
                describe_exception(error) + ")";
  fail_step(error);
}

}  // namespace pf::exec
