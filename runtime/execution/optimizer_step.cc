#include "runtime/execution/optimizer_step.h"

#include <chrono>
#include <cstring>

#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/models/init.h"

namespace pf::exec {
namespace {

using clock_type = std::chrono::steady_clock;

double micros_since(clock_type::time_point start) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

}  // namespace

OptimizerStep::OptimizerStep(const Model& model, const PipelinePlan& plan, const ModelStages& stages,
                             const ParameterOwnership& ownership)
    : plan_(&plan), stages_(&stages), ownership_(&ownership), model_(&model) {
  const TrainingConfig& c = plan.config;
  optimizer_ = make_optimizer(c.base.optimizer);
  initialize_parameters(ownership.local(), c.base.seed);
  if (stages.copy()) {
    copy_optimizer_ = make_optimizer(c.base.optimizer);
    initialize_parameters(ownership.local_copies(), c.base.seed);
  }
  // Overlapping steps: the ranks' squared norms of a step are written while the main thread may
  // commit another, so the vector is sized once, for every parameter of the model.
  if (c.overlap_steps) {
    size_t parameters = 0;
    for (int r = 0; r < plan.schedule.num_ranks(); ++r) parameters += ownership.of_rank(r).size();
    squared_norms_.assign(2 * parameters, 0.0);  // by step parity
    kept_.resize(static_cast<size_t>(plan.schedule.num_ranks()));
  }
  if (c.base.replicas > 1)
    reducer_ = std::make_unique<GradientReducer>(c.data_parallel_world, parse_gradient_reduction(c.gradient_reduction),
                                                 c.recv_timeout_seconds);
}

std::function<void(int stage)> OptimizerStep::allreduce_hook() {
  if (!reducer_) return {};
  return [this](int stage) { reducer_->submit(stage, stages_->stage(stage).parameters()); };
}

void OptimizerStep::set_timeout_seconds(double seconds) {
  if (reducer_) reducer_->set_timeout_seconds(seconds);
}

void OptimizerStep::begin_step(const Model& model) {
  if (copy_stale_) {
    sync_copy(model);
    copy_stale_ = false;
  }
  if (on_workers() && !plan_->config.overlap_steps && plan_->config.base.optimizer.clip_norm > 0.0f)
    squared_norms_.assign(model.parameters().size(), 0.0);
}

void OptimizerStep::after_rank_actions(int rank, RankStats& stats, int64_t step) {
  const bool on_ranks = on_workers() || plan_->config.overlap_steps;
  if (!on_ranks || plan_->config.base.optimizer.clip_norm <= 0.0f) return;
  const auto start = clock_type::now();
  const auto& params = ownership_->of_rank(rank);
  const auto& index = ownership_->model_index_of_rank(rank);
  const size_t offset = plan_->config.overlap_steps ? static_cast<size_t>(step % 2) * (squared_norms_.size() / 2) : 0;
  for (size_t k = 0; k < params.size(); ++k) squared_norms_[offset + index[k]] = grad_squared_norm(*params[k]);
  stats.optimizer_us += micros_since(start);
}

void OptimizerStep::gradients_changed(const std::vector<Parameter*>& params) {
  if (!on_workers() || plan_->config.base.optimizer.clip_norm <= 0.0f) return;  // the others read them in clip()
  for (Parameter* p : params) {
    const int rank = ownership_->owner(p);
    const auto& mine = ownership_->of_rank(rank);
    for (size_t k = 0; k < mine.size(); ++k)
      if (mine[k] == p) squared_norms_[ownership_->model_index_of_rank(rank)[k]] = grad_squared_norm(*p);
  }
}

std::exception_ptr OptimizerStep::wait_for_reductions() {
  if (!reducer_) return nullptr;
  try {
    reducer_->wait();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

double OptimizerStep::gathered_norm(const Model& model) {
  const auto& all = model.parameters();
  std::vector<double> partial(all.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i)
    if (ownership_->is_local_rank(ownership_->owner(all[i]))) partial[i] = grad_squared_norm(*all[i]);
  return gathered_norm(std::move(partial));
}

double OptimizerStep::gathered_norm(std::vector<double> partial) {
  const std::vector<char> gathered = plan_->config.world->all_gather(
      partial.data(), partial.size() * sizeof(double), plan_->config.recv_timeout_seconds);
  for (int r = 0; r < plan_->schedule.num_ranks(); ++r)
    for (size_t i : ownership_->model_index_of_rank(r))
      std::memcpy(&partial[i], gathered.data() + (static_cast<size_t>(r) * partial.size() + i) * sizeof(double),
                  sizeof(double));
  sum_split_squared_norms(model_->parameters(), partial, model_->tensor_parallel_group().get());
  return global_norm(partial);
}

double OptimizerStep::clip(const Model& model) {
  const float clip = plan_->config.base.optimizer.clip_norm;
  if (on_workers()) {
    if (clip <= 0.0f) return 0.0;
    if (!plan_->config.overlap_steps) return global_norm(squared_norms_);
    // A step with the barrier (overlap_steps on, no run of steps): the first of the two buffers.
    return global_norm(std::vector<double>(squared_norms_.begin(), squared_norms_.begin() +
                                                                        static_cast<ptrdiff_t>(squared_norms_.size() / 2)));
  }
  double norm = 0.0;
  if (plan_->optimizer_mode == OptimizerMode::kPerProcess) {
    norm = clip > 0.0f ? gathered_norm(model) : 0.0;
    const float scale = clip_scale(norm, clip);
    if (scale != 1.0f) scale_gradients(ownership_->local(), scale);
  } else {
    norm = clip_gradients(ownership_->local(), clip);
  }
  // Two pipelines: the second copy's gradients equal the first's; the same scale keeps them so.
  const float copy_scale = clip_scale(norm, clip);
  if (copy_scale != 1.0f) scale_gradients(ownership_->local_copies(), copy_scale);
  return norm;
}

std::exception_ptr OptimizerStep::apply(
    double lr, double grad_norm,
    const std::function<std::exception_ptr(const std::function<void(int)>&)>& run_on_workers,
    std::vector<RankExecutor::StepOutput>& outputs) {
  optimizer_->set_lr(static_cast<float>(lr));
  if (copy_optimizer_) copy_optimizer_->set_lr(static_cast<float>(lr));
  if (!on_workers()) {
    optimizer_->step(ownership_->local());
    if (copy_optimizer_) copy_optimizer_->step(ownership_->local_copies());
    return nullptr;
  }
  // Every slot exists before the workers read the state maps concurrently.
  optimizer_->begin_step(ownership_->local());
  if (copy_optimizer_) copy_optimizer_->begin_step(ownership_->local_copies());
  clip_scale_ = clip_scale(grad_norm, plan_->config.base.optimizer.clip_norm);
  return run_on_workers([this, &outputs](int rank) {
    const auto start = clock_type::now();
    const auto& params = ownership_->of_rank(rank);
    const auto& copies = ownership_->copies_of_rank(rank);
    if (clip_scale_ != 1.0f) {
      scale_gradients(params, clip_scale_);
      scale_gradients(copies, clip_scale_);  // two pipelines: the copy's gradients equal the first's
    }
    optimizer_->update_parameters(params);
    if (copy_optimizer_) copy_optimizer_->update_parameters(copies);
    outputs[static_cast<size_t>(rank)].stats.optimizer_us += micros_since(start);
  });
}

void OptimizerStep::begin_overlapped_update(double lr) {
  optimizer_->set_lr(static_cast<float>(lr));
  optimizer_->begin_step(ownership_->local());
}

double OptimizerStep::overlapped_norm(int64_t step, float* scale) {
  const float clip = plan_->config.base.optimizer.clip_norm;
  double norm = 0.0;
  if (clip > 0.0f) {
    const size_t n = squared_norms_.size() / 2;
    const std::vector<double> mine(squared_norms_.begin() + static_cast<ptrdiff_t>((step % 2) * n),
                                   squared_norms_.begin() + static_cast<ptrdiff_t>((step % 2 + 1) * n));
    if (plan_->placement == RankPlacement::kProcesses) {
      // Each process has its ranks' squared norms; the others' entries are 0 here.
      std::vector<double> partial(n, 0.0);
      for (int r = 0; r < plan_->schedule.num_ranks(); ++r) {
        if (!ownership_->is_local_rank(r)) continue;
        for (size_t i : ownership_->model_index_of_rank(r)) partial[i] = mine[i];
      }
      norm = gathered_norm(std::move(partial));
    } else {
      norm = global_norm(mine);
    }
  }
  *scale = clip_scale(norm, clip);
  return norm;
}

void OptimizerStep::step_rank(const std::vector<Parameter*>& params, float scale) {
  if (scale != 1.0f) scale_gradients(params, scale);
  optimizer_->update_parameters(params);
  for (Parameter* p : params) p->grad.fill(0.0f);
}

void OptimizerStep::update_rank(int rank, bool keep, RankStats& stats) {
  const auto start = clock_type::now();
  const auto& params = ownership_->of_rank(rank);
  if (keep) {
    Kept& k = kept_[static_cast<size_t>(rank)];
    if (k.values.empty()) {  // the first time: the copies and the optimizer's slots of these parameters
      for (Parameter* p : params) {
        k.values.push_back(p->value.clone());
        k.grads.push_back(p->grad.clone());
        for (auto& [name, slot] : optimizer_->state())
          if (name.compare(0, p->name.size() + 1, p->name + "/") == 0) {
            k.state_slots.push_back(&slot);
            k.state.push_back(slot.clone());
          }
      }
    } else {
      for (size_t i = 0; i < params.size(); ++i) {
        k.values[i].copy_from(params[i]->value);
        k.grads[i].copy_from(params[i]->grad);
      }
      for (size_t i = 0; i < k.state.size(); ++i) k.state[i].copy_from(*k.state_slots[i]);
    }
  }
  step_rank(params, 1.0f);
  stats.optimizer_us += micros_since(start);
}

void OptimizerStep::redo_update(int rank, float scale) {
  const auto& params = ownership_->of_rank(rank);
  Kept& k = kept_[static_cast<size_t>(rank)];
  PF_INTERNAL_CHECK(k.values.size() == params.size(), "post-validation: rank ", rank, " kept no update to redo");
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value.copy_from(k.values[i]);
    params[i]->grad.copy_from(k.grads[i]);
  }
  for (size_t i = 0; i < k.state.size(); ++i) k.state_slots[i]->copy_from(k.state[i]);
  step_rank(params, scale);
}

void OptimizerStep::sync_copy(const Model& model) {
  Model* copy = stages_->copy();
  PF_INTERNAL_CHECK(plan_->placement != RankPlacement::kProcesses,
                    "pipeline trainer: two copies of the model with one process per rank cannot resume yet");
  const auto& first = model.parameters();
  const auto& second = copy->parameters();
  for (size_t i = 0; i < first.size(); ++i) second[i]->value.copy_from(first[i]->value);
  copy_optimizer_->state().clear();
  for (const auto& [name, slot] : optimizer_->state()) copy_optimizer_->state().emplace(name, slot.clone());
  copy_optimizer_->set_steps_taken(optimizer_->steps_taken());
}

}  // namespace pf::exec
