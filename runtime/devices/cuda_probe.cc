#include "runtime/devices/cuda_probe.h"

#include <cuda_runtime_api.h>

#include "runtime/core/error.h"

namespace pf {

CudaAvailability probe_cuda() {
  CudaAvailability out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.reason = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  out.device_count = count;
  if (count == 0) out.reason = "no CUDA device";
  return out;
}

void require_cuda_device(int ordinal, const std::string& who, const CudaAvailability& availability) {
  const std::string name = "cuda:" + std::to_string(ordinal);
  if (availability.device_count == 0)
    fail(ErrorCode::kInvalidArgument, who, ": ", name, " is not available: no CUDA device is visible to this process",
         availability.reason.empty() ? std::string() : " (" + availability.reason + ")");
  PF_CHECK_ARG(ordinal >= 0 && ordinal < availability.device_count, who, ": ", name, " does not exist (",
               availability.device_count, " CUDA device(s) visible: cuda:0 to cuda:", availability.device_count - 1,
               ")");
}

}  // namespace pf
