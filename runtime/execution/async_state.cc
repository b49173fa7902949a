#include "runtime/execution/async_state.h"

#include "runtime/core/error.h"
#include "runtime/models/init.h"
#include "runtime/train/local_heads.h"

namespace pf::exec {

AsyncState::AsyncState(const PipelinePlan& plan, const Model& model, const ModelStages& stages,
                       const ParameterOwnership& ownership,
                       const std::vector<std::unique_ptr<RankExecutor>>& executors, Optimizer& optimizer)
    : plan_(&plan), stages_(&stages), executors_(&executors), optimizer_(&optimizer) {
  const sched::ScheduleTraits& traits = plan.schedule.traits;
  if (!traits.windowed()) return;
  if (traits.local_learning()) make_local_heads(model, stages, ownership);
  StageWeightsConfig c;
  c.method = traits.weights;
  c.options = plan.config.async;
  c.num_stages = plan.schedule.num_stages();
  c.micro_batches = plan.config.base.micro_batches;
  c.optimizer = plan.config.base.optimizer;
  stage_weights_.resize(static_cast<size_t>(c.num_stages));
  std::vector<StageWeights*> raw(stage_weights_.size(), nullptr);
  for (int s = 0; s < c.num_stages; ++s) {
    const int rank = plan.schedule.placement.rank_of(s);
    if (!ownership.is_local_rank(rank)) continue;
    c.stage = s;
    c.update_delay = plan.windows.update_delay[static_cast<size_t>(rank)];
    std::vector<Parameter*> head;
    if (const Model* h = local_head(s)) head = h->parameters();
    stage_weights_[static_cast<size_t>(s)] = std::make_unique<StageWeights>(stages.stage(s), c, head);
    raw[static_cast<size_t>(s)] = stage_weights_[static_cast<size_t>(s)].get();
  }
  for (auto& e : executors)
    if (e) e->set_async(&plan.windows, raw);
  mirror_stage_optimizers();
}

void AsyncState::make_local_heads(const Model& model, const ModelStages& stages, const ParameterOwnership& ownership) {
  // Every local stage but the last carries an auxiliary head, initialised from its own seed.
  const int S = plan_->schedule.num_stages();
  heads_.resize(static_cast<size_t>(S));
  head_stages_.reserve(static_cast<size_t>(S));
  std::vector<const Stage*> heads(static_cast<size_t>(S), nullptr);
  const TrainingConfig& c = plan_->config;
  for (int s = 0; s + 1 < S; ++s) {
    if (!ownership.is_local_rank(plan_->schedule.placement.rank_of(s))) continue;
    // The option wins over the model JSON's "local_head".
    const std::string& kind = c.local_head != "auto" ? c.local_head : model.local_head();
    heads_[static_cast<size_t>(s)] = make_local_head(model, s, stages.ranges()[static_cast<size_t>(s)].end, kind);
    Model& head = *heads_[static_cast<size_t>(s)];
    initialize_parameters(head.parameters(), local_head_seed(c.base.seed, s));
    head_stages_.emplace_back(make_stages(head, {{0, static_cast<int>(head.layers().size())}}).front());
    heads[static_cast<size_t>(s)] = &head_stages_.back();
  }
  for (auto& e : *executors_)
    if (e) e->set_local_heads(heads);
}

const Model* AsyncState::local_head(int stage) const {
  if (stage < 0 || stage >= static_cast<int>(heads_.size())) return nullptr;
  return heads_[static_cast<size_t>(stage)].get();
}

const StageWeights* AsyncState::stage_weights(int stage) const {
  if (stage < 0 || stage >= static_cast<int>(stage_weights_.size())) return nullptr;
  return stage_weights_[static_cast<size_t>(stage)].get();
}

int64_t AsyncState::steps_since_fill() const {
  for (const auto& e : *executors_)
    if (e) return e->steps_since_fill();  // every rank's executor runs the same steps
  return 0;
}

std::string AsyncState::in_flight_refusal() const {
  if (!windowed() || pipeline_empty()) return "";
  return plan_->schedule.traits.describe(plan_->schedule.name) +
         " has micro-batches in flight: drain() (pf_trainer_drain) first, then save";
}

void AsyncState::check_usable() const {
  PF_CHECK_STATE(!failed_, "pipeline trainer: an earlier step of ",
                 plan_->schedule.traits.describe(plan_->schedule.name),
                 " failed with micro-batches in flight; its stages' weights are mid-window: make a new trainer");
}

void AsyncState::before_step() {
  if (!loaded_) return;
  // Each stage takes its parameters' slots ("<parameter>/<slot>") and the update count.
  const auto& loaded = optimizer_->state();
  for (size_t s = 0; s < stage_weights_.size(); ++s) {
    StageWeights* w = stage_weights_[s].get();
    if (!w) continue;
    auto& state = w->optimizer().state();
    state.clear();
    for (const Parameter* p : stages_->stage(static_cast<int>(s)).parameters())
      for (auto it = loaded.lower_bound(p->name + "/"); it != loaded.end() && it->first.rfind(p->name + "/", 0) == 0;
           ++it)
        state[it->first] = it->second;
    w->optimizer().set_steps_taken(optimizer_->steps_taken());
    w->restore_updates(optimizer_->steps_taken());
  }
  mirror_stage_optimizers();
  loaded_ = false;
}

void AsyncState::mirror_stage_optimizers() {
  auto& state = optimizer_->state();
  state.clear();
  int64_t updates = 0;
  for (const auto& w : stage_weights_) {
    if (!w) continue;
    for (const auto& [key, tensor] : w->optimizer().state()) state[key] = tensor;
    updates = w->optimizer().steps_taken();  // equal on every stage once the pipeline is empty
  }
  optimizer_->set_steps_taken(updates);
}

}  // namespace pf::exec
