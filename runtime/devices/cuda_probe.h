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

}  // namespace pf
