#include "runtime/tensor/allocator.h"

#include <cstdlib>
#include <new>

#include "runtime/core/error.h"

namespace pf {
namespace {

class CpuAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) fail(ErrorCode::kOutOfMemory, "cpu allocator: cannot allocate ", bytes, " bytes");
    return p;
  }
  void deallocate(void* data, size_t) override { std::free(data); }
};

}  // namespace

std::string Device::to_string() const {
  return (kind == DeviceKind::kCpu ? std::string("cpu:") : std::string("cuda:")) +
         std::to_string(ordinal);
}

Allocator& allocator_for(const Device& device) {
  static CpuAllocator* cpu = new CpuAllocator();
  if (device.kind == DeviceKind::kCpu) return *cpu;
  fail(ErrorCode::kUnimplemented, "no allocator for device ", device.to_string(),
       " (this build runs on the CPU only)");
}

Storage::Storage(void* data, size_t bytes, Device device, MemoryCategory category)
    : data_(data), bytes_(bytes), device_(device), category_(category) {
  memory_tracker(device_).charge(category_, static_cast<int64_t>(bytes_));
}

Storage::~Storage() {
  allocator_for(device_).deallocate(data_, bytes_);
  memory_tracker(device_).release(category_, static_cast<int64_t>(bytes_));
}

std::shared_ptr<Storage> allocate_storage(size_t bytes, const Device& device,
                                          MemoryCategory category) {
  void* data = allocator_for(device).allocate(bytes);
  return std::make_shared<Storage>(data, bytes, device, category);
}

}  // namespace pf
