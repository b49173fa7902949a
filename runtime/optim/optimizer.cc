#include "runtime/optim/optimizer.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/cuda_optim.h"
#include "runtime/optim/sgd.h"

namespace pf {

nlohmann::json OptimizerConfig::to_json() const {
  return {{"kind", kind == Kind::kSgd ? "sgd" : "adamw"},
          {"lr", lr},
          {"momentum", momentum},
          {"weight_decay", weight_decay},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"clip_norm", clip_norm}};
}

const std::vector<std::string>& optimizer_slot_names(OptimizerConfig::Kind kind) {
  static const std::vector<std::string> sgd = {"momentum"};
  static const std::vector<std::string> adamw = {"exp_avg", "exp_avg_sq"};
  return kind == OptimizerConfig::Kind::kSgd ? sgd : adamw;
}

OptimizerConfig OptimizerConfig::from_json(const nlohmann::json& j) {
  JsonObject obj(j, "optimizer");
  OptimizerConfig c;
  const std::string kind = obj.get_string("kind", "adamw");
  PF_CHECK_ARG(kind == "sgd" || kind == "adamw", "optimizer.kind: unknown optimizer '", kind,
               "' (known: sgd, adamw)");
  c.kind = kind == "sgd" ? Kind::kSgd : Kind::kAdamW;
  // Converting a double outside float's range is undefined behaviour: range-check first.
  auto number = [&](const char* key, float fallback) {
    const double v = obj.get_number(key, fallback);
    PF_CHECK_ARG(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(), obj.path_of(key),
                 ": expected a finite number in float range, got ", v);
    return static_cast<float>(v);
  };
  c.lr = number("lr", c.lr);
  c.momentum = number("momentum", c.momentum);
  c.weight_decay = number("weight_decay", c.weight_decay);
  c.beta1 = number("beta1", c.beta1);
  c.beta2 = number("beta2", c.beta2);
  c.eps = number("eps", c.eps);
  c.clip_norm = number("clip_norm", c.clip_norm);
  obj.reject_unknown();
  c.validate();
  return c;
}

void OptimizerConfig::validate() const {
  PF_CHECK_ARG(kind == Kind::kSgd || kind == Kind::kAdamW, "optimizer.kind: unknown optimizer kind ",
               static_cast<int>(kind));
  PF_CHECK_ARG(std::isfinite(lr) && lr >= 0.0f, "optimizer.lr must be finite and >= 0, got ", lr);
  PF_CHECK_ARG(momentum >= 0.0f && momentum < 1.0f, "optimizer.momentum must be in [0, 1), got ", momentum);
  PF_CHECK_ARG(std::isfinite(weight_decay) && weight_decay >= 0.0f,
               "optimizer.weight_decay must be finite and >= 0, got ", weight_decay);
  PF_CHECK_ARG(beta1 >= 0.0f && beta1 < 1.0f, "optimizer.beta1 must be in [0, 1), got ", beta1);
  PF_CHECK_ARG(beta2 >= 0.0f && beta2 < 1.0f, "optimizer.beta2 must be in [0, 1), got ", beta2);
  PF_CHECK_ARG(eps > 0.0f, "optimizer.eps must be > 0, got ", eps);
  PF_CHECK_ARG(std::isfinite(clip_norm) && clip_norm >= 0.0f,
               "optimizer.clip_norm must be finite and >= 0 (0 = off), got ", clip_norm);
}

void Optimizer::step(const std::vector<Parameter*>& params) {
  begin_step(params);
  update_parameters(params);
}

void Optimizer::begin_step(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) {
    PF_CHECK_ARG(p->value.device() == p->grad.device(), "optimizer: parameter '", p->name, "': value (on ",
                 p->value.device().to_string(), ") and grad (on ", p->grad.device().to_string(),
                 ") are on different devices; one op cannot mix devices");
  }
  MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
  for (Parameter* p : params) {
    const Device& device = p->value.device();
    for (const char* name : slots_in_use()) {
      auto it = state_.find(p->name + "/" + name);
      if (it == state_.end()) {
        state_.emplace(p->name + "/" + name, Tensor::zeros(p->value.shape(), DType::kF32, device));
      } else if (it->second.device() != device) {
        // The parameter moved (Model::to_device) or the state came from a checkpoint on the host: the
        // state follows the parameter.
        it->second = it->second.to_device(device);
      }
    }
  }
  ++steps_;
}

void Optimizer::update_parameters(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) update(*p, steps_);
}

Tensor& Optimizer::slot(const Parameter& param, const char* slot_name) {
  auto it = state_.find(param.name + "/" + slot_name);
  PF_INTERNAL_CHECK(it != state_.end() && it->second.device() == param.value.device(), "optimizer: slot '",
                    param.name, "/", slot_name, "' was not prepared by begin_step");
  return it->second;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
  config.validate();
  if (config.kind == OptimizerConfig::Kind::kSgd) return std::make_unique<Sgd>(config);
  return std::make_unique<AdamW>(config);
}

double grad_squared_norm(const Parameter& param) {
  if (!param.tied_to.empty()) return 0.0;  // counted at its primary
  if (param.grad.device().kind != DeviceKind::kCpu) return gpu::grad_squared_norm(param);
  const float* g = param.grad.f32();
  double sum = 0.0;
  for (int64_t i = 0, n = param.grad.numel(); i < n; ++i) sum += static_cast<double>(g[i]) * g[i];
  return sum;
}

float clip_scale(double total_norm, float max_norm) {
  if (max_norm <= 0.0f || !(total_norm > max_norm)) return 1.0f;
  return static_cast<float>(max_norm / (total_norm + 1e-6));
}

double global_norm(const std::vector<double>& squared_norms) {
  double sum = 0.0;
  for (double v : squared_norms) sum += v;
  return std::sqrt(sum);
}

namespace {

// The global norm of squared norms (one per parameter, in order); scales every gradient when it
// is above max_norm. Returns the norm.
double clip_to_norm(const std::vector<Parameter*>& params, const std::vector<double>& squared, float max_norm) {
  const double norm = global_norm(squared);
  const float scale = clip_scale(norm, max_norm);
  if (scale != 1.0f) scale_gradients(params, scale);
  return norm;
}

}  // namespace

double clip_grad_norm(const std::vector<Parameter*>& params, float max_norm) {
  std::vector<double> squared;
  squared.reserve(params.size());
  for (Parameter* p : params) squared.push_back(grad_squared_norm(*p));
  return clip_to_norm(params, squared, max_norm);
}

double clip_gradients(const std::vector<Parameter*>& params, float max_norm) {
  return max_norm > 0.0f ? clip_grad_norm(params, max_norm) : 0.0;
}

double clip_gradients(const std::vector<Parameter*>& params, float max_norm, TensorParallelGroup* group) {
  if (group == nullptr || group->size() == 1) return clip_gradients(params, max_norm);
  if (max_norm <= 0.0f) return 0.0;
  std::vector<double> squared;
  squared.reserve(params.size());
  for (Parameter* p : params) squared.push_back(grad_squared_norm(*p));
  sum_split_squared_norms(params, squared, group);
  return clip_to_norm(params, squared, max_norm);
}

void sum_split_squared_norms(const std::vector<Parameter*>& params, std::vector<double>& squared,
                             TensorParallelGroup* group) {
  if (group == nullptr || group->size() == 1) return;
  PF_INTERNAL_CHECK(squared.size() == params.size(), "sum_split_squared_norms: ", squared.size(), " norms for ",
                    params.size(), " parameters");
  std::vector<double> split;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i]->shard.split()) split.push_back(squared[i]);
  split = group->sum_in_rank_order(split, "gradient norm");
  size_t k = 0;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i]->shard.split()) squared[i] = split[k++];
}

void scale_gradients(const std::vector<Parameter*>& params, float scale) {
  for (Parameter* p : params) {
    if (p->grad.device().kind != DeviceKind::kCpu) {
      gpu::scale_grad(*p, scale);
      continue;
    }
    float* g = p->grad.f32();
    for (int64_t i = 0, n = p->grad.numel(); i < n; ++i) g[i] *= scale;
  }
}

}  // namespace pf
