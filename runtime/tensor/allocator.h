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

// The allocator of a device. CPU: 64-byte aligned host memory. Others: kUnimplemented for now.
Allocator& allocator_for(const Device& device);

// Allocates `bytes` on `device`, charged to `category`. Throws kOutOfMemory naming the size.
std::shared_ptr<Storage> allocate_storage(size_t bytes, const Device& device,
                                          MemoryCategory category);

}  // namespace pf
