#include "runtime/devices/cuda/runtime.h"

#include "runtime/devices/cuda/caching_allocator.h"
#include "runtime/devices/cuda/device_copy.h"
#include "runtime/tensor/allocator.h"

namespace pf::cuda {
namespace {

Allocator& cuda_allocator(int ordinal) { return caching_allocator(ordinal); }

// Registration only stores function pointers: no CUDA call, safe on machines without a GPU.
const bool registered_at_startup = (register_cuda_runtime(), true);

}  // namespace

void register_cuda_runtime() {
  (void)registered_at_startup;
  register_device_allocator(DeviceKind::kCuda, &cuda_allocator);
  DeviceMemoryOps ops;
  ops.copy = &copy_bytes_hook;
  ops.zero = &zero_bytes_hook;
  register_device_memory_ops(DeviceKind::kCuda, ops);
}

}  // namespace pf::cuda
