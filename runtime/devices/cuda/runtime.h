// Links the CUDA device runtime into pf::Tensor: registers, for DeviceKind::kCuda, the caching
// allocator (allocator_for(Device::cuda(i)) == caching_allocator(i)) and the copy/zero hooks
// (device_copy.h). Linking //runtime/devices/cuda:runtime (alwayslink) does this from a static
// initializer, without touching the GPU; calling register_cuda_runtime() again is harmless.
#pragma once

namespace pf::cuda {

void register_cuda_runtime();

}  // namespace pf::cuda
