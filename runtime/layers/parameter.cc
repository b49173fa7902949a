#include "runtime/layers/parameter.h"

#include "runtime/core/checked_math.h"
#include "runtime/core/limits.h"

namespace pf {
namespace {

thread_local ParameterSizing* current_sizing = nullptr;

}  // namespace

ParameterSizing::ParameterSizing() : outer_(current_sizing) { current_sizing = this; }
ParameterSizing::~ParameterSizing() { current_sizing = outer_; }

Parameter make_parameter(const std::string& name, const Shape& shape, InitSpec init) {
  for (int64_t d : shape) {
    PF_CHECK_ARG(d >= 1 && d <= limits::kMaxDimension, "parameter '", name, "': dimension ", d, " of shape ",
                 shape_to_string(shape), " is outside [1, ", limits::kMaxDimension, "]");
  }
  Parameter p;
  p.name = name;
  p.shape = shape;
  p.init = init;
  if (ParameterSizing* sizing = current_sizing) {
    const int64_t bytes = checked_mul(shape_numel(shape), 4, "parameter '" + name + "' bytes");
    sizing->bytes_ = checked_add(sizing->bytes_, bytes, "the model's parameter bytes");
    ++sizing->count_;
    return p;
  }
  allocate_parameter(p);
  return p;
}

void allocate_parameter(Parameter& p) {
  if (!p.value.defined()) {
    MemoryCategoryScope scope(MemoryCategory::kParameters);
    p.value = Tensor::zeros(p.shape);
  }
  if (!p.grad.defined()) {
    MemoryCategoryScope scope(MemoryCategory::kGradients);
    p.grad = Tensor::zeros(p.shape);
  }
}

void release_parameter(Parameter& p) {
  p.value = Tensor();
  p.grad = Tensor();
}

}  // namespace pf
