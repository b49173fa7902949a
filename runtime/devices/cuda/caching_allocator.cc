#include "runtime/devices/cuda/caching_allocator.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/stream.h"

namespace pf::cuda {
namespace {

// Largest cached block handed out for a request of `rounded` bytes (no splitting, so bound the
// waste at a quarter).
size_t max_reuse_size(size_t rounded) { return rounded + rounded / 4; }

void log_error(const std::string& message) { log(LogLevel::kError, message); }

}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kRoundBytes;
  return (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
}

CachingAllocator::CachingAllocator(int device) : device_(device) {
  check_device_ordinal(device, "CachingAllocator");
}

CachingAllocator::~CachingAllocator() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceScope scope(device_);
    for (Pending& p : pending_) {
      // cudaFree waits for the device, so the block's last users are done before it is returned.
      free_.emplace(p.size, p.ptr);
      cudaEventDestroy(p.event);
    }
    pending_.clear();
    release_free_blocks_locked();
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    spare_events_.clear();
    if (!in_use_.empty()) {
      log_error("cuda:" + std::to_string(device_) + " caching allocator destroyed with " +
                std::to_string(in_use_.size()) + " blocks still in use; they are leaked");
    }
  } catch (const std::exception& e) {
    log_error(std::string("cuda caching allocator: ") + e.what());
  }
}

void CachingAllocator::set_reserve_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  reserve_limit_ = bytes;
}

cudaError_t CachingAllocator::cuda_malloc_locked(void** out, size_t size) {
  if (reserve_limit_ != 0 && stats_.bytes_reserved + size > reserve_limit_) return cudaErrorMemoryAllocation;
  cudaError_t err = cudaMalloc(out, size);
  if (err == cudaSuccess) {
    ++stats_.cuda_mallocs;
    stats_.bytes_reserved += size;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  } else {
    (void)cudaGetLastError();  // out-of-memory is not sticky; clear it for later checks
  }
  return err;
}

void CachingAllocator::collect_pending_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    cudaError_t err = cudaEventQuery(it->event);
    if (err == cudaErrorNotReady) {
      ++it;
      continue;
    }
    if (err != cudaSuccess) {
      throw_cuda_error(err, "cuda:" + std::to_string(device_) +
                                " caching allocator: querying the reuse event of a freed block");
    }
    free_.emplace(it->size, it->ptr);
    spare_events_.push_back(it->event);
    --stats_.blocks_pending;
    ++stats_.blocks_free;
    it = pending_.erase(it);
  }
}

void CachingAllocator::release_free_blocks_locked() {
  for (auto& [size, ptr] : free_) {
    cudaError_t err = cudaFree(ptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      log_error(cuda_error_message(err, "cuda:" + std::to_string(device_) + " caching allocator: cudaFree"));
      continue;  // keep it counted as reserved: we do not know its state
    }
    ++stats_.cuda_frees;
    stats_.bytes_reserved -= size;
    --stats_.blocks_free;
  }
  free_.clear();
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t rounded = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceScope scope(device_);
  collect_pending_locked();
  void* ptr = nullptr;
  auto it = free_.lower_bound(rounded);
  size_t size = rounded;
  if (it != free_.end() && it->first <= max_reuse_size(rounded)) {
    size = it->first;
    ptr = it->second;
    free_.erase(it);
    --stats_.blocks_free;
    ++stats_.cache_hits;
  } else {
    cudaError_t err = cuda_malloc_locked(&ptr, rounded);
    if (err == cudaErrorMemoryAllocation) {
      ++stats_.oom_retries;
      release_free_blocks_locked();
      err = cuda_malloc_locked(&ptr, rounded);
    }
    if (err == cudaErrorMemoryAllocation) {
      fail(ErrorCode::kOutOfMemory, "cuda:", device_, " caching allocator: out of memory allocating ", bytes,
           " bytes (", rounded, " rounded) on cuda:", device_, " after emptying the cache (", stats_.bytes_in_use,
           " bytes in use, ", stats_.bytes_reserved, " reserved, ", stats_.blocks_pending,
           " freed blocks still pending on their streams): ", cuda_error_message(err, ""));
    }
    check_cuda(err, "cuda:", device_, " caching allocator: cudaMalloc of ", rounded, " bytes");
  }
  in_use_.emplace(ptr, size);
  ++stats_.blocks_in_use;
  ++stats_.allocations;
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return ptr;
}

void CachingAllocator::deallocate(void* data, size_t /*bytes*/) {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(data);
    if (it == in_use_.end()) {
      log_error("cuda:" + std::to_string(device_) + " caching allocator: freeing a pointer it did not allocate");
      return;
    }
    const size_t size = it->second;
    in_use_.erase(it);
    --stats_.blocks_in_use;
    stats_.bytes_in_use -= size;

    DeviceScope scope(device_);
    cudaEvent_t event = nullptr;
    if (!spare_events_.empty()) {
      event = spare_events_.back();
      spare_events_.pop_back();
    } else {
      cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
      if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (err == cudaErrorCudartUnloading) return;  // process exit: nothing will reuse it
        log_error(cuda_error_message(err, "cuda:" + std::to_string(device_) +
                                              " caching allocator: creating a reuse event; the block is leaked"));
        return;  // still counted as reserved, never reused
      }
    }
    cudaError_t err = cudaEventRecord(event, current_stream_for(device_));
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      cudaEventDestroy(event);
      if (err == cudaErrorCudartUnloading) return;  // process exit: nothing will reuse it
      log_error(cuda_error_message(err, "cuda:" + std::to_string(device_) +
                                            " caching allocator: recording a reuse event; the block is leaked"));
      return;
    }
    pending_.push_back(Pending{data, size, event});
    ++stats_.blocks_pending;
  } catch (const std::exception& e) {
    log_error(std::string("cuda caching allocator: deallocate: ") + e.what());
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceScope scope(device_);
  collect_pending_locked();
  release_free_blocks_locked();
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  CachingAllocatorStats s = stats_;
  s.bytes_cached = s.bytes_reserved - s.bytes_in_use;
  return s;
}

CachingAllocator& caching_allocator(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<CachingAllocator*>, kMaxDevices> instances{};
  static std::mutex create_mutex;
  check_device_ordinal(device, "caching_allocator");
  PF_CHECK_ARG(device < kMaxDevices, "caching_allocator: device ordinal ", device, " above ", kMaxDevices - 1);
  CachingAllocator* a = instances[device].load(std::memory_order_acquire);
  if (a != nullptr) return *a;
  std::lock_guard<std::mutex> lock(create_mutex);
  a = instances[device].load(std::memory_order_acquire);
  if (a == nullptr) {
    a = new CachingAllocator(device);  // never destroyed: Storage may outlive static destruction order
    instances[device].store(a, std::memory_order_release);
  }
  return *a;
}

}  // namespace pf::cuda
