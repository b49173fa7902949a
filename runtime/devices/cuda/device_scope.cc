#include "runtime/devices/cuda/device_scope.h"

#include <cuda_runtime_api.h>

#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"

namespace pf::cuda {

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void check_device_ordinal(int device, const char* what) {
  int count = device_count();
  PF_CHECK_ARG(device >= 0 && device < count, what, ": no CUDA device cuda:", device, " (",
               count, count == 1 ? " device" : " devices", " visible)");
}

DeviceScope::DeviceScope(int device) : previous_(-1), device_(device) {
  check_device_ordinal(device, "DeviceScope");
  previous_ = current_device();
  if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice(", device, ")");
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0 || previous_ == device_) return;
  cudaError_t err = cudaSetDevice(previous_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    log(LogLevel::kError, cuda_error_message(err, "DeviceScope: restoring cuda:" + std::to_string(previous_)));
  }
}

}  // namespace pf::cuda
