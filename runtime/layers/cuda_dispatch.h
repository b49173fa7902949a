// Device dispatch of the layers and the loss. Every layer keeps its CPU code exactly as it was and,
// when its tensors are CUDA tensors, calls the CUDA backend's tensor-level operations instead
// (pf::cuda_backend(), runtime/backend/cuda_backend.h: the kernels of //runtime/kernels/cuda on the
// calling thread's current stream of the tensors' device). Inputs and parameters are f32 (fp32 only).
// Nothing here needs CUDA: the backend is a library of its own, loaded when CUDA tensors exist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/tensor/tensor.h"

namespace pf {

inline bool is_cuda(const Tensor& t) { return t.defined() && t.device().kind == DeviceKind::kCuda; }

// Throws kInvalidArgument "<type> '<name>': <what_a> (on <device a>) and <what_b> (on <device b>) are
// on different devices; ..." when the two differ (one op never mixes devices). `name` may be empty
// (the loss).
void check_same_device(const char* type, const std::string& name, const char* what_a, const Device& a,
                       const char* what_b, const Device& b);

}  // namespace pf
