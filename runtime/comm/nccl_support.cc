#include "runtime/comm/nccl_support.h"

#include <cuda_runtime_api.h>

#include "runtime/core/log.h"
#include "runtime/devices/cuda/device_scope.h"

namespace pf::comm::nccl_support {

DeviceBuffer::DeviceBuffer(int device, size_t bytes) {
  cuda::DeviceScope scope(device);
  cuda::check_cuda(cudaMalloc(&data_, bytes), "NCCL transport: allocating ", bytes,
                   " bytes of header buffers on cuda:", device);
  cuda::check_cuda(cudaMemset(data_, 0, bytes), "NCCL transport: clearing header buffers on cuda:", device);
}

DeviceBuffer::~DeviceBuffer() {
  cudaError_t err = cudaFree(data_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err != cudaErrorCudartUnloading) {
      log(LogLevel::kError, cuda::cuda_error_message(err, "NCCL transport: cudaFree"));
    }
  }
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds < 0 ? 0 : seconds));
}

double seconds_left(Clock::time_point deadline) {
  double s = std::chrono::duration<double>(deadline - Clock::now()).count();
  return s > 0 ? s : 0;
}

void drop_on_stream(Tensor& t, const cuda::CudaStream& stream) {
  cuda::CurrentStreamScope scope(stream);
  t = Tensor();
}

}  // namespace pf::comm::nccl_support
