// What CUDA devices this process can use. Returns 0 devices (never fails) on machines without a GPU
// or a driver, so callers fall back to the CPU and GPU tests skip themselves.
#pragma once

#include <string>

namespace pf {

struct CudaAvailability {
  int device_count = 0;
  std::string reason;  // why there are none (the CUDA runtime's message), empty when count > 0
};

CudaAvailability probe_cuda();

// Throws kInvalidArgument "<who>: cuda:N is not available: no CUDA device is visible to this process
// (<reason>)" or "<who>: cuda:N does not exist (K CUDA device(s) visible: ...)" unless `ordinal` names
// a visible CUDA device.
void require_cuda_device(int ordinal, const std::string& who, const CudaAvailability& availability = probe_cuda());

}  // namespace pf
