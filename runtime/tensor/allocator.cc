#include "runtime/tensor/allocator.h"

#include <atomic>
#include <cstring>

#include "runtime/backend/loader.h"
#include "runtime/core/error.h"
#include "runtime/tensor/cpu_allocator.h"

namespace pf {
namespace {

// Hooks per device kind; function-local so that registration from static initializers in other
// translation units never runs before the table exists.
struct DeviceHooks {
  std::atomic<DeviceAllocatorFn> allocator{nullptr};
  std::atomic<DeviceCopyFn> copy{nullptr};
  std::atomic<DeviceZeroFn> zero{nullptr};
};
constexpr int kNumDeviceKinds = 2;

DeviceHooks& hooks(DeviceKind kind) {
  static DeviceHooks* table = new DeviceHooks[kNumDeviceKinds];
  int i = static_cast<int>(kind);
  PF_CHECK_ARG(i >= 0 && i < kNumDeviceKinds, "unknown device kind ", i);
  return table[i];
}

[[noreturn]] void fail_not_linked(const Device& device, const char* what) {
  fail(ErrorCode::kInvalidArgument, what, ": tensor on ", device.to_string(),
       ": no runtime for this device kind is linked into the program, and host code cannot touch "
       "device memory");
}

}  // namespace

Allocator& allocator_for(const Device& device) {
  if (device.kind == DeviceKind::kCpu) return cpu_allocator();
  DeviceAllocatorFn fn = hooks(device.kind).allocator.load(std::memory_order_acquire);
  std::string load_error;
  if (fn == nullptr && device.kind == DeviceKind::kCuda) {
    // The first CUDA tensor: the CUDA backend registers its allocator when it is loaded.
    load_error = backend::load_backend_library(backend::kCudaBackend);
    fn = hooks(device.kind).allocator.load(std::memory_order_acquire);
  }
  if (fn == nullptr) {
    fail(ErrorCode::kUnimplemented, "no allocator for device ", device.to_string(), ": ",
         load_error.empty() ? "no backend for this device kind registered one" : "the CUDA backend " + load_error);
  }
  return fn(device.ordinal);
}

void register_device_allocator(DeviceKind kind, DeviceAllocatorFn allocator) {
  PF_CHECK_ARG(kind != DeviceKind::kCpu, "the CPU allocator cannot be replaced");
  hooks(kind).allocator.store(allocator, std::memory_order_release);
}

void register_device_memory_ops(DeviceKind kind, DeviceMemoryOps ops) {
  PF_CHECK_ARG(kind != DeviceKind::kCpu, "the CPU memory operations cannot be replaced");
  hooks(kind).copy.store(ops.copy, std::memory_order_release);
  hooks(kind).zero.store(ops.zero, std::memory_order_release);
}

DeviceMemoryOps device_memory_ops(DeviceKind kind) {
  DeviceMemoryOps ops;
  if (kind == DeviceKind::kCpu) return ops;
  ops.copy = hooks(kind).copy.load(std::memory_order_acquire);
  ops.zero = hooks(kind).zero.load(std::memory_order_acquire);
  return ops;
}

void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                size_t bytes, const char* what) {
  if (dst_device.kind == DeviceKind::kCpu && src_device.kind == DeviceKind::kCpu) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return;
  }
  const Device& other = dst_device.kind != DeviceKind::kCpu ? dst_device : src_device;
  if (dst_device.kind != DeviceKind::kCpu && src_device.kind != DeviceKind::kCpu &&
      dst_device.kind != src_device.kind) {
    fail(ErrorCode::kInvalidArgument, what, ": cannot copy between ", src_device.to_string(),
         " and ", dst_device.to_string(), " directly");
  }
  DeviceCopyFn fn = hooks(other.kind).copy.load(std::memory_order_acquire);
  if (fn == nullptr) fail_not_linked(other, what);
  if (bytes > 0) fn(dst, dst_device, src, src_device, bytes);
}

void zero_bytes(void* dst, const Device& device, size_t bytes, const char* what) {
  if (device.kind == DeviceKind::kCpu) {
    if (bytes > 0) std::memset(dst, 0, bytes);
    return;
  }
  DeviceZeroFn fn = hooks(device.kind).zero.load(std::memory_order_acquire);
  if (fn == nullptr) fail_not_linked(device, what);
  if (bytes > 0) fn(dst, device, bytes);
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
