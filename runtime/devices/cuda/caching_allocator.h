// A per-device caching allocator for CUDA memory (implements pf::Allocator; allocator_for(
// Device::cuda(i)) returns caching_allocator(i) once //runtime/devices/cuda:runtime is linked).
//
// * Sizes are rounded up to a multiple of 512 bytes (0 bytes -> 512).
// * A freed block is not returned to CUDA: it goes to a size-keyed free list and is handed out again
//   for a later request of the same rounded size, or a larger one up to 1.25x (no splitting).
// * Cross-stream reuse rule: when a block is freed, an event is recorded on the freeing thread's
//   current stream for this device (stream.h; the legacy default stream when none is set). The
//   block becomes reusable only after that event has completed. So: all device work that reads or
//   writes a block must be issued on (or be waited for by) the current stream of the thread that
//   drops the last reference, before it drops it. Work on other streams (NCCL, copy streams)
//   must either finish first or the owner must free under a CurrentStreamScope of that stream
//   (the NCCL transport does the latter).
// * cudaMalloc failing with out-of-memory -> the cache is emptied (free-list blocks and completed
//   pending blocks go back to CUDA) and the cudaMalloc is retried once; if that fails too,
//   kOutOfMemory naming the size, the device and the allocator's usage.
// * Memory accounting is unchanged: pf::Storage charges the device's MemoryTracker with the
//   requested bytes per category; the allocator's own stats count rounded bytes.
// * cudaFree (empty_cache, the out-of-memory retry) implicitly synchronizes the device. Do not call
//   empty_cache while device work can wait on another thread (e.g. a posted NCCL receive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <cuda_runtime_api.h>

#include "runtime/tensor/allocator.h"

namespace pf::cuda {

struct CachingAllocatorStats {
  size_t bytes_in_use = 0;         // rounded bytes of blocks handed out and not yet freed
  size_t bytes_reserved = 0;       // bytes obtained from cudaMalloc and not returned
  size_t bytes_cached = 0;         // reserved - in use: free-list blocks plus pending ones
  size_t peak_bytes_in_use = 0;
  size_t peak_bytes_reserved = 0;
  int64_t blocks_in_use = 0;
  int64_t blocks_free = 0;         // reusable now
  int64_t blocks_pending = 0;      // freed, waiting for their stream event
  int64_t allocations = 0;         // allocate() calls that succeeded
  int64_t cache_hits = 0;          // ... served from the free list
  int64_t cuda_mallocs = 0;
  int64_t cuda_frees = 0;
  int64_t oom_retries = 0;         // cudaMalloc failures that emptied the cache and retried
};

class CachingAllocator : public Allocator {
 public:
  static constexpr size_t kRoundBytes = 512;
  static size_t round_size(size_t bytes);

  explicit CachingAllocator(int device);
  // Returns cached blocks to CUDA; blocks still in use are leaked (and logged). The process-wide
  // instances of caching_allocator() are never destroyed.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Throws kOutOfMemory (after one retry with an emptied cache), kCudaError.
  void* allocate(size_t bytes) override;
  // Never throws (Storage calls it from its destructor): errors are logged, and a block whose
  // reuse event cannot be recorded is kept out of circulation rather than reused unsafely.
  void deallocate(void* data, size_t bytes) override;

  // Returns every reusable cached block to CUDA (cudaFree); pending blocks stay until their events
  // complete.
  void empty_cache();
  CachingAllocatorStats stats() const;
  int device() const { return device_; }

  // Testing aid: a cudaMalloc that would take bytes_reserved above `bytes` fails as if the device
  // were out of memory (0 = no limit).
  void set_reserve_limit(size_t bytes);

 private:
  struct Pending {
    void* ptr;
    size_t size;
    cudaEvent_t event;
  };
  void collect_pending_locked();
  void release_free_blocks_locked();
  cudaError_t cuda_malloc_locked(void** out, size_t size);

  const int device_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> in_use_;  // pointer -> rounded size
  std::multimap<size_t, void*> free_;          // rounded size -> reusable block
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  size_t reserve_limit_ = 0;
  CachingAllocatorStats stats_;
};

// The process-wide allocator of `device` (created on first use, never destroyed). Throws
// kInvalidArgument when `device` is not a visible CUDA device.
CachingAllocator& caching_allocator(int device);

}  // namespace pf::cuda
