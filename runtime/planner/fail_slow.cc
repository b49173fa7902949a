#include "runtime/planner/fail_slow.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/core/error.h"
#include "runtime/planner/stage_partition.h"

namespace pf::plan {
namespace {

std::vector<int> stage_begins(const std::vector<int>& layers_per_stage) {
  std::vector<int> begin(layers_per_stage.size() + 1, 0);
  for (size_t s = 0; s < layers_per_stage.size(); ++s) begin[s + 1] = begin[s] + layers_per_stage[s];
  return begin;
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
                                 FailSlowOptions fail_slow, std::string scratch_dir)
    : AdaptiveTrainer(std::make_unique<exec::PipelineTrainer>(std::move(model), options), std::move(costs), fail_slow,
                      std::move(scratch_dir)) {}

AdaptiveTrainer::AdaptiveTrainer(std::unique_ptr<exec::PipelineTrainer> trainer, MicroBatchCosts costs,
                                 FailSlowOptions fail_slow, std::string scratch_dir)
    : model_(trainer->shared_model()),
      options_(trainer->options()),
      costs_(std::move(costs)),
      fail_slow_(fail_slow),
      scratch_dir_(std::move(scratch_dir)),
      trainer_(std::move(trainer)) {
  PF_CHECK_ARG(static_cast<size_t>(costs_.layers.size()) == model_->layers().size(), "fail-slow: the profile has ",
               costs_.layers.size(), " layers, the model ", model_->layers().size());
  PF_CHECK_ARG(options_.world == nullptr, "fail-slow adaptation runs the ranks as threads of one process");
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

StepResult AdaptiveTrainer::step(const Batch& batch) {
  move_if_decided();
  return after_step(trainer_->step(batch));
}

StepResult AdaptiveTrainer::step(DataSource& source) {
  move_if_decided();
  return after_step(trainer_->step(source));
}

StepResult AdaptiveTrainer::after_step(StepResult result) {
  std::vector<double> busy;
  for (const exec::RankStats& r : trainer_->last_stats().ranks) busy.push_back(r.busy_us * 1e-6);
  if (!detector_->observe(busy)) return result;
  std::vector<double> slowdown = known_slowdown_;
  for (size_t r = 0; r < slowdown.size(); ++r) slowdown[r] *= detector_->slowdown()[r];
  const double fastest = *std::min_element(slowdown.begin(), slowdown.end());
  for (double& k : slowdown) k /= fastest;
  const std::vector<int> from = layers_per_stage();
  const std::vector<int> to = partition_for_slowdown(costs_, trainer_->schedule(), slowdown);
  known_slowdown_ = slowdown;
  if (!to.empty() && to != from) {
    decided_ = to;  // the next step moves: until then pipeline() is the trainer that ran this one
    adaptations_.push_back({trainer_->metrics().step, slowdown, from, to});
    return result;
  }
  watch();
  return result;
}

void AdaptiveTrainer::move_if_decided() {
  if (decided_.empty()) return;
  const std::vector<int> to = std::move(decided_);
  decided_.clear();
  move_to(to);
  watch();
}

void AdaptiveTrainer::move_to(const std::vector<int>& layers_per_stage) {
  static std::atomic<int> serial{0};
  const std::string path = scratch_dir_ + "/pipeforge-repartition-" + std::to_string(getpid()) + "-" +
                           std::to_string(serial++) + ".pfckpt";
  save_checkpoint(*trainer_, path);
  struct Remove {
    const std::string& path;
    ~Remove() { std::remove(path.c_str()); }
  } remove{path};
  trainer_.reset();
  options_.layers_per_stage = layers_per_stage;
  trainer_ = std::make_unique<exec::PipelineTrainer>(model_, options_);
  load_checkpoint(*trainer_, path);
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
