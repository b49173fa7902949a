#include "runtime/planner/fail_slow.h"

#include <algorithm>
#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/planner/repartition.h"
#include "runtime/planner/stage_partition.h"
#include "runtime/schedules/async_schedules.h"

namespace pf::plan {
namespace {

std::vector<int> stage_begins(const std::vector<int>& layers_per_stage) {
  std::vector<int> begin(layers_per_stage.size() + 1, 0);
  for (size_t s = 0; s < layers_per_stage.size(); ++s) begin[s + 1] = begin[s] + layers_per_stage[s];
  return begin;
}

// Rank 0's costs on every process of `world` (each process's own measurement differs, and the
// processes must predict and partition with the same numbers).
MicroBatchCosts costs_of_rank_0(comm::World& world, MicroBatchCosts costs, double timeout) {
  std::vector<double> times;
  std::vector<int64_t> counts = {costs.rows, costs.tokens};
  for (const LayerCosts& l : costs.layers) {
    times.insert(times.end(), {l.forward_s, l.backward_input_s, l.backward_weight_s});
    counts.insert(counts.end(), {l.parameters, l.activation_bytes, l.shared_with_previous_bytes,
                                 l.weight_pending_bytes, l.input_bytes});
  }
  world.broadcast(times.data(), times.size() * sizeof(double), 0, timeout);
  world.broadcast(counts.data(), counts.size() * sizeof(int64_t), 0, timeout);
  costs.rows = counts[0];
  costs.tokens = counts[1];
  for (size_t i = 0; i < costs.layers.size(); ++i) {
    LayerCosts& l = costs.layers[i];
    l.forward_s = times[3 * i];
    l.backward_input_s = times[3 * i + 1];
    l.backward_weight_s = times[3 * i + 2];
    const int64_t* c = &counts[2 + 5 * i];
    l.parameters = c[0];
    l.activation_bytes = c[1];
    l.shared_with_previous_bytes = c[2];
    l.weight_pending_bytes = c[3];
    l.input_bytes = c[4];
  }
  return costs;
}

}  // namespace

FailSlowDetector::FailSlowDetector(std::vector<double> predicted_busy, FailSlowOptions options)
    : predicted_(std::move(predicted_busy)), options_(options), slowdown_(predicted_.size(), 1.0) {
  PF_CHECK_ARG(options_.threshold > 1.0, "fail-slow threshold must be > 1, got ", options_.threshold);
  PF_CHECK_ARG(options_.patience >= 1, "fail-slow patience must be >= 1, got ", options_.patience);
}

bool FailSlowDetector::observe(const std::vector<double>& measured_busy) {
  PF_CHECK_ARG(measured_busy.size() == predicted_.size(), "fail-slow: ", measured_busy.size(), " ranks measured, ",
               predicted_.size(), " predicted");
  std::vector<double> ratio(predicted_.size(), 0.0);
  double fastest = std::numeric_limits<double>::infinity();
  for (size_t r = 0; r < ratio.size(); ++r) {
    if (predicted_[r] <= 0) continue;  // a rank with nothing to do cannot be slow
    ratio[r] = measured_busy[r] / predicted_[r];
    if (ratio[r] > 0) fastest = std::min(fastest, ratio[r]);
  }
  bool slow = false;
  for (size_t r = 0; r < ratio.size(); ++r) {
    slowdown_[r] = ratio[r] > 0 && fastest < std::numeric_limits<double>::infinity() ? ratio[r] / fastest : 1.0;
    slow = slow || slowdown_[r] >= options_.threshold;
  }
  streak_ = slow ? streak_ + 1 : 0;
  return streak_ >= options_.patience;
}

std::vector<double> predicted_busy_per_rank(const MicroBatchCosts& costs, const sched::Schedule& schedule,
                                            const std::vector<int>& layers_per_stage) {
  PF_CHECK_ARG(static_cast<int>(layers_per_stage.size()) == schedule.stages_per_pipeline(), "fail-slow: ",
               layers_per_stage.size(), " stage sizes for ", schedule.stages_per_pipeline(), " stages");
  const std::vector<int> begin = stage_begins(layers_per_stage);
  std::vector<double> busy(static_cast<size_t>(schedule.num_ranks()), 0.0);
  for (int s = 0; s < schedule.num_stages(); ++s) {
    const int j = schedule.model_stage(s);
    busy[static_cast<size_t>(schedule.placement.rank_of(s))] +=
        schedule.micro_batches_per_pipeline() *
        stage_costs(costs, begin[static_cast<size_t>(j)], begin[static_cast<size_t>(j) + 1]).seconds();
  }
  return busy;
}

std::vector<int> partition_for_slowdown(const MicroBatchCosts& costs, const sched::Schedule& schedule,
                                        const std::vector<double>& slowdown) {
  PF_CHECK_ARG(schedule.pipelines == 1, "fail-slow: re-partitioning two pipelines is not supported");
  PF_CHECK_ARG(static_cast<int>(slowdown.size()) == schedule.num_ranks(), "fail-slow: ", slowdown.size(),
               " slowdowns for ", schedule.num_ranks(), " ranks");
  PartitionLimits limits;
  for (int s = 0; s < schedule.num_stages(); ++s)
    limits.stage_time_factor.push_back(slowdown[static_cast<size_t>(schedule.placement.rank_of(s))]);
  return partition_for_plan(costs, schedule.num_stages(), limits);
}

AdaptiveTrainer::AdaptiveTrainer(std::shared_ptr<Model> model, TrainingConfig options, MicroBatchCosts costs,
                                 FailSlowOptions fail_slow)
    : AdaptiveTrainer(std::move(model), std::move(options)) {
  fail_slow_ = fail_slow;
  start(std::move(costs));
}

namespace {

// The config with adaptation on, so that resolve() refuses what adaptation cannot move.
TrainingConfig adapting(TrainingConfig config) {
  config.adaptation.enabled = true;
  return config;
}

const Model& model_of(const std::shared_ptr<Model>& model) {
  PF_CHECK_ARG(model != nullptr, "fail-slow: model is null");
  return *model;
}

}  // namespace

AdaptiveTrainer::AdaptiveTrainer(std::shared_ptr<Model> model, TrainingConfig options)
    : AdaptiveTrainer(model, resolve(model_of(model), adapting(std::move(options)))) {}

AdaptiveTrainer::AdaptiveTrainer(std::shared_ptr<Model> model, PipelinePlan plan, std::optional<MicroBatchCosts> costs)
    : model_(std::move(model)), options_(plan.config) {
  PF_CHECK_ARG(options_.adaptation.enabled, "fail-slow: the plan's config does not ask for adaptation");
  fail_slow_.threshold = options_.adaptation.threshold;
  fail_slow_.patience = options_.adaptation.patience;
  trainer_ = std::make_unique<exec::PipelineTrainer>(model_, std::move(plan));
  known_slowdown_.assign(static_cast<size_t>(trainer_->schedule().num_ranks()), 1.0);
  if (costs) start(std::move(*costs));
}

void AdaptiveTrainer::start(MicroBatchCosts costs) {
  PF_CHECK_ARG(static_cast<size_t>(costs.layers.size()) == model_->layers().size(), "fail-slow: the profile has ",
               costs.layers.size(), " layers, the model ", model_->layers().size());
  costs_ = options_.world ? costs_of_rank_0(*options_.world, std::move(costs), options_.recv_timeout_seconds)
                          : std::move(costs);
  profiled_ = true;
  watch();
}

void AdaptiveTrainer::profile(const Batch& micro_batch) {
  const int64_t rows = micro_batch.rows();
  const ModelProfile p = profile_model_copy(*model_, micro_batch, {rows}, options_.base.optimizer, 3);
  start(p.at_rows(rows));
}

std::vector<int> AdaptiveTrainer::layers_per_stage() const { return trainer_->plan().layers_per_stage; }

void AdaptiveTrainer::watch() {
  std::vector<double> predicted = predicted_busy_per_rank(costs_, trainer_->schedule(), layers_per_stage());
  for (size_t r = 0; r < predicted.size(); ++r) predicted[r] *= known_slowdown_[r];
  detector_ = std::make_unique<FailSlowDetector>(std::move(predicted), fail_slow_);
}

void AdaptiveTrainer::check_usable() const {
  if (!move_failure_.empty())
    fail(ErrorCode::kFailedPrecondition, "fail-slow: the trainer is unusable after a failed move: ", move_failure_);
}

StepResult AdaptiveTrainer::step(const Batch& batch) {
  check_usable();
  // A batch that does not split fails in the pipeline's step, which says why.
  const int count = options_.base.step_micro_batches();
  if (!profiled_ && batch.rows() % count == 0) profile(batch.micro_batch(0, count));
  move_if_decided();
  return after_step(trainer_->step(batch));
}

StepResult AdaptiveTrainer::step(DataSource& source) {
  check_usable();
  if (!profiled_) {  // on the step's first micro-batch; the source is read once more and rewound
    const int64_t position = source.position();
    const Batch first = source.next();
    source.seek(position);
    profile(first);
  }
  move_if_decided();
  return after_step(trainer_->step(source));
}

StepResult AdaptiveTrainer::after_step(StepResult result) {
  if (!profiled_) return result;
  // With a world, last_stats().ranks is gathered over it: every process sees every rank's time.
  std::vector<double> busy;
  for (const exec::RankStats& r : trainer_->last_stats().ranks) busy.push_back(r.busy_us * 1e-6);
  const bool slow = detector_->observe(busy);
  std::vector<double> slowdown = known_slowdown_;
  std::vector<int> to;
  if (slow) {
    for (size_t r = 0; r < slowdown.size(); ++r) slowdown[r] *= detector_->slowdown()[r];
    const double fastest = *std::min_element(slowdown.begin(), slowdown.end());
    for (double& k : slowdown) k /= fastest;
    to = partition_for_slowdown(costs_, trainer_->schedule(), slowdown);
  }
  if (options_.world) check_same_decision(to);
  if (!slow) return result;
  const std::vector<int> from = layers_per_stage();
  known_slowdown_ = slowdown;
  if (!to.empty() && to != from) {
    decided_ = to;  // the next step moves: until then pipeline() is the trainer that ran this one
    adaptations_.push_back({trainer_->metrics().step, slowdown, from, to});
    return result;
  }
  watch();
  return result;
}

void AdaptiveTrainer::check_same_decision(const std::vector<int>& to) const {
  comm::World& world = *options_.world;
  const size_t stages = static_cast<size_t>(trainer_->schedule().num_stages());
  std::vector<int64_t> mine(stages, -1);  // -1: no move decided
  for (size_t s = 0; s < to.size() && s < stages; ++s) mine[s] = to[s];
  const std::vector<int64_t> all = comm::all_gather_int64s(world, mine, options_.recv_timeout_seconds);
  auto text = [&](size_t r) {
    std::string out;
    for (size_t s = 0; s < stages; ++s) out += (s ? "," : "") + std::to_string(all[r * stages + s]);
    return "{" + out + "}";
  };
  for (size_t r = 0; r < static_cast<size_t>(world.size()); ++r)
    if (!std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * stages)))
      fail(ErrorCode::kInternal, "rank ", world.rank(), ": fail-slow at step ", trainer_->metrics().step, ": rank ", r,
           " decided ", text(r), " where rank ", world.rank(), " decided ", text(static_cast<size_t>(world.rank())),
           " (-1: no move)");
}

void AdaptiveTrainer::drain() {
  check_usable();
  move_if_decided();
  trainer_->drain();
}

void AdaptiveTrainer::move_if_decided() {
  if (decided_.empty()) return;
  const std::vector<int> to = std::move(decided_);
  decided_.clear();
  move_to(to);
  watch();
}

void AdaptiveTrainer::move_to(const std::vector<int>& layers_per_stage) {
  try {
    repartition(&trainer_, layers_per_stage);
  } catch (const std::exception& e) {
    move_failure_ = e.what();
    throw;
  }
  options_.layers_per_stage = layers_per_stage;
}

nlohmann::json adaptation_to_json(const Adaptation& a) {
  return {{"step", a.step}, {"slowdown", a.slowdown}, {"from", a.from}, {"to", a.to}};
}

nlohmann::json adaptations_to_json(const std::vector<Adaptation>& adaptations) {
  nlohmann::json out = nlohmann::json::array();
  for (const Adaptation& a : adaptations) out.push_back(adaptation_to_json(a));
  return out;
}

nlohmann::json adaptation_log_fields(const std::vector<Adaptation>& adaptations, int64_t step) {
  for (const Adaptation& a : adaptations)
    if (a.step == step) return {{"adaptation", adaptation_to_json(a)}};
  return nullptr;
}

}  // namespace pf::plan
