#include "runtime/execution/weight_versions.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::exec {

// A kept copy of the stage's weights after `id` updates. The current version has no values (they
// are the parameters) until an update needs to keep it.
struct StageWeights::Version {
  int64_t id = 0;
  std::vector<Tensor> values;
  int* alive = nullptr;  // StageWeights::materialized_ while values are held
  ~Version() {
    if (!values.empty() && alive) --*alive;
  }
};

struct StageWeights::InFlight {
  std::shared_ptr<Version> version;     // stashing methods: what F used
  std::shared_ptr<Version> prediction;  // spectrain 2: F's prediction
  int64_t updates_at_forward = 0;       // pipemare
};

StageWeights::StageWeights(const Stage& stage, const StageWeightsConfig& config, std::vector<Parameter*> extra)
    : config_(config), params_(stage.parameters()), optimizer_(make_optimizer(config.optimizer)) {
  params_.insert(params_.end(), extra.begin(), extra.end());
  for (Parameter* p : params_) {
    PF_CHECK_ARG(p->allocated() && p->value.device() == Device::cpu(), "asynchronous schedules: parameter '",
                 p->name, "' must be allocated on the CPU");
    version_bytes_ += p->value.nbytes();
  }
  if (config_.method == AsyncMethod::kSpecTrain) {
    PF_CHECK_ARG(config_.optimizer.kind == OptimizerConfig::Kind::kSgd && config_.optimizer.momentum > 0.0f,
                 "schedule spectrain predicts weights from SGD's momentum: it needs optimizer sgd with momentum > 0");
  }
  if (config_.method == AsyncMethod::kPipeMare) {
    MemoryCategoryScope category(MemoryCategory::kOptimizerState);
    for (Parameter* p : params_) delta_.push_back(Tensor::zeros(p->shape));
  }
  live_ = new_version(0);
}

StageWeights::~StageWeights() {
  // The versions' destructors count down into materialized_; drop them while it exists.
  in_flight_.clear();
  kept_.clear();
  live_.reset();
}

void StageWeights::restart() {
  PF_CHECK_STATE(in_flight_.empty(), "stage ", config_.stage, ": restart with ", in_flight_.size(),
                 " micro-batches in flight");
  start_version_ = current_;
  next_forward_ = 0;
  kept_.clear();
}

void StageWeights::restore_updates(int64_t updates) {
  PF_CHECK_STATE(in_flight_.empty(), "stage ", config_.stage, ": restoring a checkpoint with ", in_flight_.size(),
                 " micro-batches in flight");
  current_ = start_version_ = updates;
  next_forward_ = 0;
  kept_.clear();
  live_ = new_version(current_);
}

int64_t StageWeights::forward_version(int64_t e) const {
  switch (config_.method) {
    case AsyncMethod::kPipeDream:
      return config_.options.vertical_sync ? start_version_ + std::max<int64_t>(0, e - (config_.num_stages - 1))
                                           : current_;
    case AsyncMethod::kPipeDream2BW:
      return start_version_ + std::max<int64_t>(0, e / config_.micro_batches - 1);
    default:
      return current_;
  }
}

std::shared_ptr<StageWeights::Version> StageWeights::version_object(int64_t v) {
  if (v == current_) return live_;
  auto it = kept_.find(v);
  PF_INTERNAL_CHECK(it != kept_.end(), "stage ", config_.stage, ": weight version ", v, " is not kept (current ",
                    current_, ")");
  return it->second;
}

std::shared_ptr<StageWeights::Version> StageWeights::new_version(int64_t id) {
  auto v = std::make_shared<Version>();
  v->id = id;
  v->alive = &materialized_;
  return v;
}

void StageWeights::copy_parameters_into(Version& v) {
  MemoryCategoryScope category(MemoryCategory::kParameters);
  for (Parameter* p : params_) v.values.push_back(p->value.clone());
  ++materialized_;
}

std::shared_ptr<StageWeights::Version> StageWeights::materialize_copy() {
  auto v = new_version(current_);
  copy_parameters_into(*v);
  return v;
}

void StageWeights::swap_in(const std::vector<Tensor>& values) {
  PF_INTERNAL_CHECK(saved_.empty() && values.size() == params_.size(), "stage ", config_.stage,
                    ": unbalanced weight swap");
  for (size_t i = 0; i < params_.size(); ++i) {
    saved_.push_back(params_[i]->value);
    params_[i]->value = values[i];
  }
}

void StageWeights::swap_out() {
  if (saved_.empty()) return;
  for (size_t i = 0; i < params_.size(); ++i) params_[i]->value = saved_[i];
  saved_.clear();
}

std::vector<const float*> StageWeights::momentum_buffers() {
  std::vector<const float*> out;
  auto& state = optimizer_->state();
  for (Parameter* p : params_) {
    auto it = state.find(p->name + "/momentum");
    if (it == state.end()) return {};
    out.push_back(it->second.f32());
  }
  return out;
}

void StageWeights::predict(float scale, const std::vector<const float*>& buffers, std::vector<Tensor>* out) {
  if (out->size() != params_.size()) {
    out->clear();
    MemoryCategoryScope category(MemoryCategory::kParameters);
    for (Parameter* p : params_) out->push_back(Tensor::empty(p->shape));
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const float* w = params_[i]->value.f32();
    const float* b = buffers[i];
    float* y = (*out)[i].f32();
    const int64_t n = params_[i]->value.numel();
    for (int64_t j = 0; j < n; ++j) y[j] = w[j] - scale * b[j];
  }
}

void StageWeights::before_forward(int64_t e) {
  next_forward_ = e + 1;
  InFlight f;
  f.updates_at_forward = current_;
  switch (config_.method) {
    case AsyncMethod::kPipeDream:
    case AsyncMethod::kPipeDream2BW: {
      f.version = version_object(forward_version(e));
      if (f.version != live_) swap_in(f.version->values);
      break;
    }
    case AsyncMethod::kSpecTrain: {
      const int k = config_.stage, n = config_.num_stages;
      const int s = config_.options.spectrain_version == 1 ? k / 2 + n - k - 1 : n - k - 1;
      const auto v = momentum_buffers();
      if (config_.options.spectrain_version == 2) {
        // The prediction is kept for the BW of this micro-batch: a version of its own.
        f.prediction = materialize_copy();
        if (!v.empty()) predict(static_cast<float>(s) * config_.optimizer.lr, v, &f.prediction->values);
        swap_in(f.prediction->values);
      } else if (!v.empty()) {
        predict(static_cast<float>(s) * config_.optimizer.lr, v, &scratch_);
        swap_in(scratch_);
      }
      break;
    }
    case AsyncMethod::kPipeMare:
    case AsyncMethod::kLocal:
      break;
  }
  in_flight_[e] = std::move(f);
  note_peak();
}

void StageWeights::after_forward(int64_t) { swap_out(); }

void StageWeights::before_recompute(int64_t e) {
  auto it = in_flight_.find(e);
  PF_INTERNAL_CHECK(it != in_flight_.end(), "stage ", config_.stage, ": RECOMPUTE of micro-batch ", e, " without its F");
  PF_INTERNAL_CHECK(it->second.version != nullptr, "stage ", config_.stage,
                    ": RECOMPUTE needs the weights F used, which only stashing methods keep");
  if (it->second.version != live_) swap_in(it->second.version->values);
}

void StageWeights::after_recompute(int64_t) { swap_out(); }

void StageWeights::before_backward(int64_t e) {
  auto it = in_flight_.find(e);
  PF_INTERNAL_CHECK(it != in_flight_.end(), "stage ", config_.stage, ": BW of micro-batch ", e, " without its F");
  const InFlight& f = it->second;
  switch (config_.method) {
    case AsyncMethod::kPipeDream:
    case AsyncMethod::kPipeDream2BW:
      if (f.version != live_) swap_in(f.version->values);
      break;
    case AsyncMethod::kSpecTrain:
      if (f.prediction) {
        swap_in(f.prediction->values);
      } else {
        const auto v = momentum_buffers();
        if (!v.empty()) {
          predict(static_cast<float>(config_.stage / 2) * config_.optimizer.lr, v, &scratch_);
          swap_in(scratch_);
        }
      }
      break;
    case AsyncMethod::kLocal:
      break;
    case AsyncMethod::kPipeMare: {
      const int64_t d = current_ - f.updates_at_forward;
      if (d > 0) {
        std::vector<const float*> buffers;
        for (const Tensor& t : delta_) buffers.push_back(t.f32());
        predict(static_cast<float>(d), buffers, &scratch_);
        swap_in(scratch_);
      }
      break;
    }
  }
}

void StageWeights::after_backward(int64_t e) {
  swap_out();
  in_flight_.erase(e);
  prune();
}

void StageWeights::prune() {
  if (!stashing()) return;
  const int64_t oldest_needed = forward_version(next_forward_);
  for (auto it = kept_.begin(); it != kept_.end();) it = it->first < oldest_needed ? kept_.erase(it) : std::next(it);
}

void StageWeights::update(int64_t) {
  PF_INTERNAL_CHECK(saved_.empty(), "stage ", config_.stage, ": update while another version is swapped in");
  if (stashing()) {
    // Keep the current weights when a micro-batch in flight or a later forward still needs them
    // (vertical sync and 2BW: forwards use versions by micro-batch number, not the newest).
    const bool by_number = config_.method == AsyncMethod::kPipeDream2BW || config_.options.vertical_sync;
    if (by_number && forward_version(next_forward_) <= current_) kept_[current_] = live_;
    if (live_.use_count() > 1) copy_parameters_into(*live_);
    live_ = new_version(current_ + 1);
  }
  if (config_.method == AsyncMethod::kPipeMare) {
    // T1: the learning rate anneals from lr / tau to lr over K updates.
    const double tau = std::max(1, config_.update_delay);
    const double K = static_cast<double>(config_.options.pipemare_anneal_updates);
    const double progress = K > 0 ? std::min(static_cast<double>(current_) / K, 1.0) : 1.0;
    optimizer_->set_lr(static_cast<float>(config_.optimizer.lr * std::pow(tau, -(1.0 - progress))));
    if (before_update_.size() != params_.size()) {
      MemoryCategoryScope category(MemoryCategory::kOptimizerState);
      for (Parameter* p : params_) before_update_.push_back(Tensor::empty(p->shape));
    }
    for (size_t i = 0; i < params_.size(); ++i)
      std::memcpy(before_update_[i].f32(), params_[i]->value.f32(), params_[i]->value.nbytes());
  }
  optimizer_->step(params_);
  for (Parameter* p : params_) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
  current_ += 1;
  if (config_.method == AsyncMethod::kPipeMare) {
    // T2: d <- g d + (1 - g)(W_new - W_old).
    const float g = config_.options.pipemare_decay;
    for (size_t i = 0; i < params_.size(); ++i) {
      float* d = delta_[i].f32();
      const float* w = params_[i]->value.f32();
      const float* w0 = before_update_[i].f32();
      const int64_t n = params_[i]->value.numel();
      for (int64_t j = 0; j < n; ++j) d[j] = g * d[j] + (1.0f - g) * (w[j] - w0[j]);
    }
  }
  prune();
  note_peak();
}

void StageWeights::note_peak() { peak_versions_ = std::max(peak_versions_, versions_alive()); }

}  // namespace pf::exec
