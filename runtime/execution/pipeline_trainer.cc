#include "runtime/execution/pipeline_trainer.h"

#include <chrono>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/schedules/forward_only.h"
#include "runtime/train/micro_batches.h"

namespace pf::exec {
namespace {

using clock_type = std::chrono::steady_clock;

const Model& require_model(const std::shared_ptr<Model>& model) {
  PF_CHECK_ARG(model != nullptr, "pipeline trainer: model is null");
  return *model;
}

}  // namespace

// One run of the workers: what they run on and what they leave.
struct PipelineTrainer::Step {
  enum class Kind { kTrain, kDrain, kEvaluate } kind = Kind::kTrain;
  const std::vector<Batch>* micro = nullptr;
  const sched::Schedule* evaluation = nullptr;  // kEvaluate: the forward-only schedule
  clock_type::time_point t0;
  clock_type::time_point optimizer_start;  // after the workers: clipping and the update
  std::vector<RankExecutor::StepOutput> outputs;  // per rank
};

PipelineTrainer::PipelineTrainer(std::shared_ptr<Model> model, const TrainingConfig& config)
    : PipelineTrainer(model, resolve(require_model(model), config)) {}

PipelineTrainer::PipelineTrainer(std::shared_ptr<Model> model, PipelinePlan plan)
    : plan_(std::move(plan)),
      model_(std::move(model)),
      stages_(require_model(model_), plan_),
      ownership_(*model_, stages_, plan_),
      optimizer_(*model_, plan_, stages_, ownership_),
      tied_(*model_, stages_.copy(), ownership_),
      devices_(make_rank_devices(plan_, *model_, stages_)),
      group_(make_rank_group(plan_)),
      executors_(make_executors(plan_, *model_, stages_, ownership_, optimizer_)),
      memory_(plan_, &executors_, group_.get()),
      async_(plan_, *model_, stages_, ownership_, executors_, optimizer_.optimizer()),
      report_(plan_) {
  pool_ = std::make_unique<WorkerPool>(
      local_ranks(plan_, ownership_), plan_.config.cpu_affinity, plan_.config.base.blas_threads,
      [this](int rank, std::exception_ptr error) { group_->rank_failed(rank, describe_exception(error)); });
  if (plan_.config.overlap_steps) {
    // Each rank steps its own parameters: one shared by several ranks (updated once, after all of
    // their gradients) cannot be.
    if (plan_.optimizer_mode == OptimizerMode::kMainThread && plan_.config.rank_optimizer)
      fail(ErrorCode::kUnimplemented,
             "overlap_steps: this model shares parameters between ranks, which one rank cannot update by itself; "
             "not supported yet");
    overlap_ = std::make_unique<StepOverlap>(static_cast<int>(local_ranks(plan_, ownership_).size()),
                                             [this] { return group_->cancelled(); });
  }
}

PipelineTrainer::~PipelineTrainer() {
  try {
    settle(false);  // the workers leave a run begun ahead before the parts they use go
  } catch (const std::exception& e) {
    log(LogLevel::kWarning, std::string("pipeline trainer: ending overlapped steps: ") + e.what());
  }
}

PipelineParts PipelineTrainer::parts() const {
  return PipelineParts{model_, stages_, ownership_, *devices_, *group_, memory_, optimizer_, async_};
}

ProcessGroups PipelineTrainer::process_groups() const { return process_groups_of(plan_); }

CheckpointRefusal PipelineTrainer::checkpoint_refusal(bool loading) const {
  const Refusal r = find_refusal(capability_facts(*model_, plan_.config, &plan_.schedule),
                                 loading ? Operation::kLoadCheckpoint : Operation::kCheckpoint);
  if (r.refused()) return {static_cast<int>(r.code), r.message};
  const std::string in_flight = async_.in_flight_refusal();
  if (!in_flight.empty()) return {static_cast<int>(ErrorCode::kFailedPrecondition), in_flight};
  return {};
}

std::string PipelineTrainer::parameter_checksum() const { return ownership_.checksum(*model_); }

void PipelineTrainer::set_recv_timeout_seconds(double seconds) {
  PF_CHECK_ARG(seconds > 0, "recv_timeout_seconds must be > 0, got ", seconds);
  plan_.config.recv_timeout_seconds = seconds;
  for (auto& e : executors_)
    if (e) e->set_timeout_seconds(seconds);
  optimizer_.set_timeout_seconds(seconds);
}

void PipelineTrainer::plan_activation_memory(const Batch& micro_batch) {
  settle();
  memory_.plan(*model_, stages_, *devices_, micro_batch);
}

void PipelineTrainer::restore_progress(int64_t step, int64_t data_position) {
  settle();
  report_.metrics().step = step;
  report_.metrics().data_position = data_position;
  optimizer_.optimizer().set_steps_taken(step);
  optimizer_.copy_is_stale();  // two pipelines: the second copy takes the loaded state (next step)
  async_.checkpoint_loaded();  // windowed: the stages take the checkpoint's optimizer state (next step)
}

std::exception_ptr PipelineTrainer::run_workers(const std::function<void(int rank)>& job) {
  return pool_->run([&](int rank) {
    const auto scopes = devices_->enter(rank);
    job(rank);
  });
}

void PipelineTrainer::worker_step(int rank, Step& step) {
  RankExecutor& executor = *executors_[static_cast<size_t>(rank)];
  RankExecutor::StepOutput* out = &step.outputs[static_cast<size_t>(rank)];
  auto cancelled = [this] { return group_->cause(); };
  comm::Transport& endpoint = group_->endpoint(rank);
  switch (step.kind) {
    case Step::Kind::kEvaluate:
      executor.run_evaluation(*step.evaluation, *step.micro, step.t0, endpoint, cancelled, out);
      return;
    case Step::Kind::kDrain:
      executor.run_drain(step.t0, endpoint, cancelled, out);
      return;
    case Step::Kind::kTrain:
      executor.run_step(*step.micro, step.t0, endpoint, memory_.store(rank), cancelled, out);
      optimizer_.after_rank_actions(rank, out->stats);
      return;
  }
}

void PipelineTrainer::fail_step(std::exception_ptr error) {
  group_->reset();
  std::rethrow_exception(error);
}

StepResult PipelineTrainer::step(const Batch& batch) {
  settle();
  return run_step(split_into_micro_batches(*model_, batch, plan_.config.base.step_micro_batches()));
}

StepResult PipelineTrainer::step(DataSource& source) {
  if (overlaps() && (expected_steps_ > 1 || overlap_->in_flight() > 0)) return overlapped_step(source);
  const StepResult r = step_on_source(*model_, source, plan_.config.base.step_micro_batches(),
                                      [&](const std::vector<Batch>& micro) { return run_step(micro); });
  report_.metrics().data_position = source.position();
  return r;
}

void PipelineTrainer::drain() {
  settle();
  if (!async_.windowed() || async_.pipeline_empty()) return;
  async_.check_usable();
  const std::vector<Batch> none;
  Step step;
  step.kind = Step::Kind::kDrain;
  step.micro = &none;
  step.outputs.assign(static_cast<size_t>(plan_.schedule.num_ranks()), RankExecutor::StepOutput());
  step.t0 = clock_type::now();
  if (std::exception_ptr error = run_workers([&](int rank) { worker_step(rank, step); })) {
    async_.mark_failed();
    std::rethrow_exception(error);
  }
  report_.collect(step.outputs, std::vector<mem::StoreStats>(static_cast<size_t>(plan_.schedule.num_ranks())));
  async_.after_drain();
}

EvalResult PipelineTrainer::evaluate(DataSource& source, int micro_batches) {
  PF_CHECK_ARG(micro_batches >= 1, "evaluate: micro_batches must be >= 1, got ", micro_batches);
  settle();
  check_capabilities(capability_facts(*model_, plan_.config, &plan_.schedule), Operation::kEvaluate);
  // Two pipelines: the first copy of the model evaluates.
  const sched::Schedule& s = schedule();
  const int chain = s.stages_per_pipeline();
  const sched::Schedule forward_only = sched::forward_only_schedule(s.placement, micro_batches, chain);
  const std::vector<Batch> micro = pull_micro_batches(*model_, source, micro_batches);
  std::vector<Batch> storage;
  Step step;
  step.kind = Step::Kind::kEvaluate;
  step.micro = &devices_->to_devices(micro, &storage);
  devices_->sync("copying the evaluation micro-batches");
  step.evaluation = &forward_only;
  step.outputs.assign(static_cast<size_t>(s.num_ranks()), RankExecutor::StepOutput());
  group_->reset();
  step.t0 = clock_type::now();
  std::exception_ptr error = run_workers([&](int rank) { worker_step(rank, step); });
  if (!error) {
    try {
      devices_->sync_ranks();
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (error) fail_step(error);
  std::vector<float> losses;
  std::vector<int64_t> correct;
  report_.evaluation(step.outputs, s.placement.rank_of(chain - 1), micro_batches, &losses, &correct);
  double loss_sum = 0.0;
  int64_t right = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    loss_sum += losses[i];
    right += correct[i];
  }
  return eval_result(micro, loss_sum, right);
}

// Windowed schedules: the mean over the units whose last-stage forward ran in this step (local
// learning: the last stage lags p - 1); an update per step scales each loss by 1 / m.
double PipelineTrainer::finish_loss(const std::vector<float>& losses, int64_t window, int units) const {
  const sched::Schedule& s = plan_.schedule;
  const int last_rank = s.placement.rank_of(s.num_stages() - 1);
  double sum = 0.0;
  int count = 0;
  for (const sched::Action& a : plan_.windows.step_list(window, last_rank)) {
    if (a.kind != sched::ActionKind::kForward || a.stage != s.num_stages() - 1) continue;
    sum += losses[static_cast<size_t>(a.micro_batch % units)];
    ++count;
  }
  if (plan_.loss_scale == 1.0f) return count > 0 ? sum / count : 0.0;
  return count == units ? sum : sum / (static_cast<double>(plan_.loss_scale) * count);
}

StepResult PipelineTrainer::run_step(const std::vector<Batch>& step_micro_batches) {
  const auto start = clock_type::now();
  const TrainingConfig& c = plan_.config;
  // Data parallel: this replica's m of the step's D * m.
  const int m = c.base.micro_batches, replica = replica_index(plan_);
  const std::vector<Batch> replica_slice =
      c.base.replicas > 1 ? std::vector<Batch>(step_micro_batches.begin() + static_cast<ptrdiff_t>(replica) * m,
                                               step_micro_batches.begin() + static_cast<ptrdiff_t>(replica + 1) * m)
                          : std::vector<Batch>();
  const std::vector<Batch>& micro_batches = c.base.replicas > 1 ? replica_slice : step_micro_batches;
  if (memory_.wants_plan() && !micro_batches.empty()) plan_activation_memory(micro_batches[0]);
  optimizer_.begin_step(*model_);
  const bool windowed = async_.windowed();
  if (windowed) async_.check_usable();
  const int64_t window = windowed ? async_.steps_since_fill() : 0;  // which window list this step runs
  // The micro-batches where the ranks read them (they outlive the step's device work).
  std::vector<Batch> storage;
  const std::vector<Batch>* on_devices = &micro_batches;
  if (windowed) {
    async_.before_step();  // each stage zeroes its gradients at its UPDATE
  } else {
    devices_->zero_gradients(ownership_.local(), ownership_.local_copies());
    on_devices = &devices_->to_devices(micro_batches, &storage);
    devices_->sync("zeroing the gradients and copying the micro-batches");
  }
  // Sequence slices: the executors run one unit (micro-batch slice) per schedule micro-batch number.
  const std::vector<Batch> units =
      c.seq_slices > 1 ? split_into_sequence_slices(micro_batches, c.seq_slices) : std::vector<Batch>();
  Step step;
  step.micro = c.seq_slices > 1 ? &units : on_devices;
  const std::vector<mem::StoreStats> store_stats = run_pipeline(step);
  StepResult result = finish_step(step, static_cast<int>(step.micro->size()), window);
  for (const Batch& b : step_micro_batches) {
    result.samples += b.rows();
    result.tokens += b.targets.numel();
  }
  const auto end = clock_type::now();
  result.seconds = std::chrono::duration<double>(end - start).count();
  report_.collect(step.outputs, store_stats);
  if (plan_.fills_bubbles) report_.plan_bubble_fill(executors_);
  result.bubble_rate = report_.stats().bubble_rate;
  for (const RankStats& rs : report_.stats().ranks)
    result.peak_activation_bytes.push_back(static_cast<int64_t>(rs.peak_activation_bytes));
  report_.finish(result, std::chrono::duration<double, std::micro>(end - start).count(),
                 std::chrono::duration<double, std::micro>(end - step.optimizer_start).count(),
                 optimizer_.on_workers());
  return result;
}

std::vector<mem::StoreStats> PipelineTrainer::run_pipeline(Step& step) {
  const bool windowed = async_.windowed();
  step.outputs.assign(static_cast<size_t>(plan_.schedule.num_ranks()), RankExecutor::StepOutput());
  // Windowed schedules: messages sent at the end of the last step are still to be received.
  if (!windowed) group_->reset();
  memory_.reset_stats();
  step.t0 = clock_type::now();
  std::exception_ptr error = run_workers([&](int rank) { worker_step(rank, step); });
  if (!error) {
    try {
      devices_->sync_ranks();  // every rank's device work is done before anything it used is freed
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Data parallel: every reduction the ALLREDUCEs started is done before the gradients are read.
  if (std::exception_ptr reduction = optimizer_.wait_for_reductions()) {
    if (!error) error = reduction;
    group_->rank_failed(local_ranks(plan_, ownership_).front(), describe_exception(reduction));
  }
  std::vector<mem::StoreStats> store_stats = memory_.finish_step(&error);
  if (error) {
    if (windowed) async_.mark_failed();
    fail_step(error);
  }
  return store_stats;
}

StepResult PipelineTrainer::finish_step(Step& step, int units, int64_t window) {
  const TrainingConfig& c = plan_.config;
  StepResult result;
  const std::vector<float> losses = report_.losses(step.outputs, schedule(), units);
  step.optimizer_start = clock_type::now();
  if (async_.windowed()) {
    result.loss = finish_loss(losses, window, units);
    result.lr = c.base.optimizer.lr;  // every stage updated itself during the step
    return result;
  }
  if (!tied_.empty()) {  // weight tying: both halves of a pair get their sum before the norm
    try {
      tied_.sum(*group_, c.recv_timeout_seconds);
    } catch (...) {
      // The peer may have its sum already: it learns of the failure from the group (its later steps
      // fail), as after a failed data-parallel reduction.
      const std::exception_ptr error = std::current_exception();
      group_->rank_failed(local_ranks(plan_, ownership_).front(), describe_exception(error));
      fail_step(error);
    }
    optimizer_.gradients_changed(tied_.changed());
  }
  result.grad_norm = optimizer_.clip(*model_);  // 0 with clipping off, where no norm is computed
  for (float loss : losses) result.loss += loss;  // every replica's, in micro-batch order
  result.lr = c.base.lr_at(report_.metrics().step);
  if (std::exception_ptr e = optimizer_.apply(
          result.lr, result.grad_norm, [this](const std::function<void(int)>& job) { return run_workers(job); },
          step.outputs))
    fail_step(e);
  devices_->sync("the optimizer step");  // the update is done before the next step's workers start
  return result;
}

}  // namespace pf::exec
