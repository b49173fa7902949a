#include "runtime/devices/cuda_probe.h"

#include <cuda_runtime_api.h>

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

}  // namespace pf
