#include "runtime/layers/parameter.h"

namespace pf {

Parameter make_parameter(const std::string& name, const Shape& shape, InitSpec init) {
  Parameter p;
  p.name = name;
  p.init = init;
  {
    MemoryCategoryScope scope(MemoryCategory::kParameters);
    p.value = Tensor::zeros(shape);
  }
  {
    MemoryCategoryScope scope(MemoryCategory::kGradients);
    p.grad = Tensor::zeros(shape);
  }
  return p;
}

}  // namespace pf
