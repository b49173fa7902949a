#include "runtime/planner/fail_slow.h"

#include <algorithm>
#include <limits>

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

AdaptiveTrainer::AdaptiveTrainer(std::shared_ptr<Model> model, exec::PipelineOptions options, MicroBatchCosts costs,
                                 FailSlowOptions fail_slow)
    : AdaptiveTrainer(std::make_unique<exec::PipelineTrainer>(std::move(model), options), std::move(costs), fail_slow) {}

AdaptiveTrainer::AdaptiveTrainer(std::unique_ptr<exec::PipelineTrainer> trainer, MicroBatchCosts costs,
                                 FailSlowOptions fail_slow)
    : model_(trainer->shared_model()),
      options_(trainer->options()),
      costs_(std::move(costs)),
      fail_slow_(fail_slow),
      trainer_(std::move(trainer)) {
  PF_CHECK_ARG(static_cast<size_t>(costs_.layers.size()) == model_->layers().size(), "fail-slow: the profile has ",
               costs_.layers.size(), " layers, the model ", model_->layers().size());
  PF_CHECK_ARG(!options_.world || !options_.data_parallel_world || options_.data_parallel_world->size() == 1,
               "fail-slow adaptation across processes moves one pipeline; data-parallel replicas are not supported");
  if (options_.world) costs_ = costs_of_rank_0(*options_.world, std::move(costs_), options_.recv_timeout_seconds);
  PF_CHECK_ARG(trainer_->schedule().pipelines == 1 && !sched::is_asynchronous(trainer_->schedule()),
               "fail-slow adaptation needs a synchronous schedule with one pipeline, not '", trainer_->schedule().name,
               "'");
  known_slowdown_.assign(static_cast<size_t>(trainer_->schedule().num_ranks()), 1.0);
  watch();
}

std::vector<int> AdaptiveTrainer::layers_per_stage() const { return exec::layer_counts(trainer_->stages()); }

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
  move_if_decided();
  return after_step(trainer_->step(batch));
}

StepResult AdaptiveTrainer::step(DataSource& source) {
  check_usable();
  move_if_decided();
  return after_step(trainer_->step(source));
}

StepResult AdaptiveTrainer::after_step(StepResult result) {
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
