#include "runtime/models/model.h"

#include "runtime/models/local_head_kind.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace pf {

Model::Model(InputSpec input, std::vector<std::unique_ptr<Layer>> layers, std::unique_ptr<Loss> loss)
    : input_(input), layers_(std::move(layers)), loss_(std::move(loss)) {
  PF_CHECK_ARG(!layers_.empty(), "model: at least one layer is required");
  PF_CHECK_ARG(loss_ != nullptr, "model: a loss is required");
  PF_CHECK_ARG(input_.classes > 0, "model: input.classes must be > 0");
  std::set<std::string> names;
  for (auto& layer : layers_) {
    for (Parameter* p : layer->parameters()) {
      PF_CHECK_ARG(names.insert(p->name).second, "model: duplicate parameter name '", p->name,
                   "' (give layers distinct names)");
      parameters_.push_back(p);
    }
  }
  for (Parameter* copy : parameters_) {
    if (copy->tied_to.empty()) continue;
    Parameter* primary = find_parameter(copy->tied_to);
    PF_CHECK_ARG(primary != nullptr && primary != copy, "model: parameter '", copy->name, "' is tied to '",
                 copy->tied_to, "', which is not another parameter of the model");
    PF_CHECK_ARG(primary->tied_to.empty(), "model: parameter '", copy->name, "' is tied to '", copy->tied_to,
                 "', itself a tied copy (tie to its primary '", primary->tied_to, "')");
    PF_CHECK_ARG(primary->shape == copy->shape, "model: parameter '", copy->name, "' ", shape_to_string(copy->shape),
                 " is tied to '", primary->name, "' ", shape_to_string(primary->shape), ": the shapes differ");
    copy->init = primary->init;  // initialised as its primary, from its primary's stream
    tied_.emplace_back(primary, copy);
  }
}

Parameter* Model::find_parameter(const std::string& name) const {
  for (Parameter* p : parameters_) {
    if (p->name == name) return p;
  }
  return nullptr;
}

void Model::to_device(const Device& device) {
  for (Parameter* p : parameters_) {
    if (p->value.defined() && p->value.device() != device) {
      MemoryCategoryScope scope(MemoryCategory::kParameters);
      p->value = p->value.to_device(device);
    }
    if (p->grad.defined() && p->grad.device() != device) {
      MemoryCategoryScope scope(MemoryCategory::kGradients);
      p->grad = p->grad.to_device(device);
    }
  }
  device_ = device;
}

int64_t Model::num_parameter_elements() const {
  int64_t n = 0;
  for (Parameter* p : parameters_) n += shape_numel(p->shape);  // also while not allocated
  return n;
}

int64_t Model::num_distinct_parameter_elements() const {
  int64_t n = 0;
  for (Parameter* p : parameters_) {
    if (p->tied_to.empty()) n += shape_numel(p->shard.split() ? p->shard.full : p->shape);
  }
  return n;
}

void Model::set_local_head(const std::string& kind) {
  check_local_head_kind(kind);
  local_head_ = kind;
}

nlohmann::json Model::to_json() const {
  nlohmann::json input;
  if (input_.kind == InputSpec::Kind::kFeatures) {
    input = {{"kind", "features"}, {"features", input_.features}, {"classes", input_.classes}};
  } else {
    input = {{"kind", "tokens"}, {"vocab", input_.vocab}, {"seq_len", input_.seq_len},
             {"classes", input_.classes}};
  }
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : layers_) layers.push_back(l->config());
  nlohmann::json out = {{"format", "pipeforge.model/1"}, {"input", input}, {"layers", layers}, {"loss", loss_->type()}};
  if (local_head_ != "auto") out["local_head"] = local_head_;
  return out;
}

void Model::check_batch(const Tensor& inputs, const Tensor& targets, const std::string& what) const {
  PF_CHECK_ARG(inputs.defined(), what, ": inputs are missing");
  PF_CHECK_ARG(targets.defined(), what, ": targets are missing");
  if (inputs.device().kind != DeviceKind::kCpu || targets.device().kind != DeviceKind::kCpu) {
    // Device tensors: check host copies (never read device memory from the host).
    check_batch(inputs.to_device(Device::cpu()), targets.to_device(Device::cpu()), what);
    return;
  }
  PF_CHECK_ARG(inputs.rank() >= 1 && inputs.dim(0) > 0, what, ": inputs must have at least one row, got ",
               shape_to_string(inputs.shape()));
  const int64_t rows = inputs.dim(0);
  if (input_.kind == InputSpec::Kind::kFeatures) {
    PF_CHECK_ARG(inputs.dtype() == DType::kF32 && inputs.rank() == 2 && inputs.dim(1) == input_.features,
                 what, ": inputs: expected f32 [rows, ", input_.features, "], got ",
                 dtype_name(inputs.dtype()), " ", shape_to_string(inputs.shape()));
    PF_CHECK_ARG(targets.dtype() == DType::kI32 && targets.rank() == 1 && targets.dim(0) == rows, what,
                 ": targets: expected i32 [", rows, "], got ", dtype_name(targets.dtype()), " ",
                 shape_to_string(targets.shape()));
    // A NaN or infinity would pass a ReLU as 0 or poison the weights: refused before the step.
    const float* x = inputs.f32();
    for (int64_t i = 0; i < inputs.numel(); ++i) {
      PF_CHECK_ARG(std::isfinite(x[i]), what, ": inputs: row ", i / input_.features, ", column ",
                   i % input_.features, " is ", x[i], " (inputs must be finite numbers)");
    }
  } else {
    PF_CHECK_ARG(inputs.dtype() == DType::kI32 && inputs.rank() == 2 && inputs.dim(1) >= 1 &&
                     inputs.dim(1) <= input_.seq_len,
                 what, ": inputs: expected i32 [rows, T] with 1 <= T <= ", input_.seq_len, ", got ",
                 dtype_name(inputs.dtype()), " ", shape_to_string(inputs.shape()));
    PF_CHECK_ARG(targets.dtype() == DType::kI32 && targets.shape() == inputs.shape(), what,
                 ": targets: expected i32 ", shape_to_string(inputs.shape()), ", got ",
                 dtype_name(targets.dtype()), " ", shape_to_string(targets.shape()));
    const int32_t* ids = inputs.i32();
    for (int64_t i = 0; i < inputs.numel(); ++i) {
      PF_CHECK_ARG(ids[i] >= 0 && ids[i] < input_.vocab, what, ": inputs: token id ", ids[i],
                   " at flat index ", i, " is outside [0, ", input_.vocab, ")");
    }
  }
  const int32_t* t = targets.i32();
  for (int64_t i = 0; i < targets.numel(); ++i) {
    PF_CHECK_ARG(t[i] >= 0 && t[i] < input_.classes, what, ": targets: class ", t[i], " at flat index ", i,
                 " is outside [0, ", input_.classes, ")");
  }
}

}  // namespace pf
