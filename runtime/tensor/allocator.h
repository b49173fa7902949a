// Per-device allocators. Every block is charged to the device's MemoryTracker under the category
// that was current when it was allocated, and released under the same category.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf {

// A block of device memory; frees itself (and un-charges the tracker) when the last owner drops it.
class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, MemoryCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  MemoryCategory category_;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* data, size_t bytes) = 0;
};

// The allocator of a device. CPU: 64-byte aligned host memory with a bounded cache of freed blocks
// (cpu_allocator.h: PF_CPU_ALLOCATOR_CACHE_BYTES, stats, release_cache). Other kinds: whatever was registered
// with register_device_allocator (the CUDA backend registers its caching allocator when it is
// linked in or loaded; the first CUDA allocation loads it, runtime/backend/loader.h);
// kUnimplemented naming the device and why when there is none.
Allocator& allocator_for(const Device& device);

// --- Registration hooks for device kinds other than the CPU -------------------------------------
// //runtime/tensor depends on no device library: a device runtime registers itself (typically from
// a static initializer in an alwayslink library). Registering twice replaces the earlier entry;
// registration is thread-safe, but should happen before tensors of that kind exist.
using DeviceAllocatorFn = Allocator& (*)(int ordinal);
void register_device_allocator(DeviceKind kind, DeviceAllocatorFn allocator);

// Copies `bytes` from `src` (memory of `src_device`) to `dst` (memory of `dst_device`); at least one
// of the two is of the registered kind. Must return only when `dst` may be read by the host if it
// is host memory, and must be ordered with the device work of the calling thread otherwise.
using DeviceCopyFn = void (*)(void* dst, const Device& dst_device, const void* src,
                              const Device& src_device, size_t bytes);
// Sets `bytes` of device memory to zero (ordered with the calling thread's device work).
using DeviceZeroFn = void (*)(void* dst, const Device& device, size_t bytes);
struct DeviceMemoryOps {
  DeviceCopyFn copy = nullptr;
  DeviceZeroFn zero = nullptr;
};
void register_device_memory_ops(DeviceKind kind, DeviceMemoryOps ops);
// The registered operations of `kind` (null members when none are registered; the CPU has none).
DeviceMemoryOps device_memory_ops(DeviceKind kind);

// Copies between any two devices: memcpy when both are the CPU, otherwise the registered copy of
// the non-CPU kind. Throws kInvalidArgument naming the device and `what` (the operation, e.g.
// "Tensor::fill") when that kind has no registered copy: host code never touches device memory.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                size_t bytes, const char* what);
// Zeroes `bytes` at `dst` on `device` (memset on the CPU); kInvalidArgument as above.
void zero_bytes(void* dst, const Device& device, size_t bytes, const char* what);

// Allocates `bytes` on `device`, charged to `category`. Throws kOutOfMemory naming the size.
std::shared_ptr<Storage> allocate_storage(size_t bytes, const Device& device,
                                          MemoryCategory category);

}  // namespace pf
