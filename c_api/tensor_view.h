// Borrowed pf_tensor_view -> owned pf::Tensor (a copy: views only live for the call).
#pragma once

#include <string>

#include "c_api/pipeforge.h"
#include "runtime/tensor/tensor.h"

namespace pf::capi {

constexpr int kMaxViewDims = 8;

// Checks the view (dtype, device, rank, shape, strides, data) and copies it; errors name `what`
// (e.g. "inputs"). The copy is charged to the thread's current memory category.
Tensor tensor_from_view(const pf_tensor_view& view, const std::string& what);

}  // namespace pf::capi
