// The CPU allocator: 64-byte aligned host memory with a bounded cache of freed blocks
// (allocator_for(Device::cpu()) returns cpu_allocator()).
//
// Why a cache: glibc returns freed memory to the kernel (heap trimming, and munmap for big
// blocks), so the per-call tensors of every step fault their pages in again; that cost is a
// noticeable part of a CPU training step and depends on the order of allocations.
//
// * Size classes: a request is rounded up to a multiple of 64 bytes up to 1 KiB, above that to one
//   of 8 classes per power of two (2^e + i * 2^(e-3), i = 1..8), so a block wastes under 12.5%.
//   Sizes repeat from step to step, so almost every allocation after the first step is a hit.
// * A freed block goes to its class's free list (last in, first out) unless the cached bytes would
//   exceed the limit; then it goes back to the system. Blocks are never split or merged.
// * Limit: the environment variable PF_CPU_ALLOCATOR_CACHE_BYTES (a byte count, read once at first
//   use; 0 disables the cache; anything that is not a plain decimal number is ignored), else
//   kDefaultCacheBytes, or 0 when the AddressSanitizer runtime is in the process, so that ASan's
//   own quarantine keeps finding uses after free. set_cache_limit changes it at run time. Under
//   ASan with the cache enabled anyway, cached blocks are poisoned until they are handed out.
// * Thread safety: every member function may be called from any thread. Each size class has its
//   own mutex (a worker's allocation rarely meets another thread's in the same class); the
//   counters are atomics.
// * Memory accounting is not the allocator's: pf::Storage charges the device's MemoryTracker with
//   the requested bytes per category, whether or not the block came from the cache. Cached blocks
//   are memory the process holds that no tracker category counts (stats().cached_bytes).
// * Failure: when the system allocation fails, the cache is released and the allocation retried
//   once; then kOutOfMemory naming the size. Never aborts.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/tensor/allocator.h"

namespace pf {

struct CpuAllocatorStats {
  int64_t hits = 0;            // allocations served from the cache
  int64_t misses = 0;          // allocations that went to the system
  int64_t returned = 0;        // frees that went back to the system (cache full, disabled or too big)
  int64_t cached_blocks = 0;   // blocks in the free lists now
  size_t cached_bytes = 0;     // their (rounded) bytes
  size_t limit_bytes = 0;      // the cap on cached_bytes (0 = caching disabled)
};

class CpuAllocator : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kDefaultCacheBytes = size_t{1} << 30;  // 1 GiB
  // Requests above this are never cached (their class index would not fit the table).
  static constexpr size_t kMaxCachedBlock = size_t{1} << 40;

  // The bytes a request of `bytes` is given (its size class; 0 bytes -> 64).
  static size_t class_size(size_t bytes);
  // The limit from PF_CPU_ALLOCATOR_CACHE_BYTES, or the default (0 under ASan).
  static size_t limit_from_environment();
  // Whether the AddressSanitizer runtime is linked into the process.
  static bool address_sanitizer_present();

  explicit CpuAllocator(size_t cache_limit_bytes);
  // Returns the cached blocks to the system. The process-wide cpu_allocator() is never destroyed.
  ~CpuAllocator() override;
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;

  // Throws kOutOfMemory (after one retry with an emptied cache).
  void* allocate(size_t bytes) override;
  // `bytes` must be the size given to allocate. Never throws.
  void deallocate(void* data, size_t bytes) override;

  // Returns every cached block to the system.
  void release_cache();
  // Sets the cap on cached bytes (0 disables caching) and returns cached blocks until it holds.
  void set_cache_limit(size_t bytes);
  CpuAllocatorStats stats() const;

 private:
  static constexpr int kSmallClasses = 16;      // 64 B .. 1 KiB
  static constexpr int kClassesPerDoubling = 8;
  static constexpr int kNumClasses = kSmallClasses + (40 - 10) * kClassesPerDoubling;
  static int class_index(size_t bytes);

  struct SizeClass {
    size_t size = 0;  // the bytes of each block
    std::mutex mutex;
    std::vector<void*> free;
  };
  // Returns blocks of the classes from the largest down until at most `keep` bytes stay cached.
  void trim_to(size_t keep);

  std::array<SizeClass, kNumClasses> classes_;
  std::atomic<size_t> limit_;
  std::atomic<size_t> cached_bytes_{0};
  std::atomic<int64_t> cached_blocks_{0};
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
  std::atomic<int64_t> returned_{0};
};

// The process-wide CPU allocator (created on first use with limit_from_environment(), never
// destroyed).
CpuAllocator& cpu_allocator();

}  // namespace pf
