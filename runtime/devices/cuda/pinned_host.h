// Page-locked ("pinned") host memory from cudaHostAlloc: asynchronous copies to and from it really
// overlap with compute, so the activation store's host tier uses it on GPU machines. RAII and
// move-only; the memory is not charged to any device's MemoryTracker (the host tier keeps its own
// counters).
#pragma once

#include <cstddef>

namespace pf::cuda {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // cudaHostAlloc(bytes, cudaHostAllocPortable): usable with every device of the process. Throws
  // kOutOfMemory (naming the size) when CUDA cannot pin that much, kCudaError for other failures
  // (e.g. no driver or device). 0 bytes gives an empty buffer without calling CUDA.
  explicit PinnedHostBuffer(size_t bytes);
  ~PinnedHostBuffer();  // cudaFreeHost; the caller must make sure no copy still uses the memory
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// True when `p` points into page-locked host memory registered with CUDA (cudaHostAlloc or
// cudaHostRegister); false for pageable or device memory and when there is no driver.
bool is_pinned_host_memory(const void* p);

}  // namespace pf::cuda
