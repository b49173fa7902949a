#include "runtime/devices/cuda/pinned_host.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"

namespace pf::cuda {

PinnedHostBuffer::PinnedHostBuffer(size_t bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail(ErrorCode::kOutOfMemory, "pinned host memory: cannot allocate ", bytes,
         " bytes: ", cuda_error_message(err, ""));
  }
  check_cuda(err, "pinned host memory: cudaHostAlloc of ", bytes, " bytes");
  data_ = p;
  size_ = bytes;
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void PinnedHostBuffer::release() noexcept {
  if (data_ == nullptr) return;
  cudaError_t err = cudaFreeHost(data_);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (err != cudaErrorCudartUnloading) log(LogLevel::kError, cuda_error_message(err, "pinned host memory: cudaFreeHost"));
  }
  data_ = nullptr;
  size_ = 0;
}

bool is_pinned_host_memory(const void* p) {
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace pf::cuda
