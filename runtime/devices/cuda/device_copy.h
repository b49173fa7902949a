// Copies of pf::Tensor data between host memory and CUDA devices, and the copy/zero hooks that
// //runtime/devices/cuda:runtime registers for DeviceKind::kCuda (so Tensor::to_device,
// copy_from, clone, fill, zeros and to_vector work on CUDA tensors).
//
// Ordering: the *_async functions enqueue on the given stream and return; host memory involved must
// stay alive and untouched until the stream has passed the copy (use pinned memory, pinned_host.h,
// for copies that really overlap). The hooks use the calling thread's current stream (stream.h) and
// wait on the host whenever host memory or a second device is involved, so a host read right after
// Tensor::to_vector() or a host free after Tensor::to_device() is always safe; device-to-device
// copies and zeroing on one device stay ordered on the stream without a host wait.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "runtime/tensor/tensor.h"

namespace pf::cuda {

// dst and src: same shape and dtype, each on the CPU or a CUDA device (kInvalidArgument otherwise).
void copy_tensor_async(const Tensor& dst, const Tensor& src, cudaStream_t stream);
// A new tensor on `device` (charged to the thread's current memory category), filled on `stream`.
Tensor to_device_async(const Tensor& src, const Device& device, cudaStream_t stream);
// Raw host buffers (e.g. a PinnedHostBuffer) of at least tensor.nbytes() bytes.
void copy_to_host_async(const Tensor& src, void* host, size_t host_bytes, cudaStream_t stream);
void copy_from_host_async(const Tensor& dst, const void* host, size_t host_bytes, cudaStream_t stream);

// The registered hooks (see register_device_memory_ops in runtime/tensor/allocator.h).
void copy_bytes_hook(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                     size_t bytes);
void zero_bytes_hook(void* dst, const Device& device, size_t bytes);

}  // namespace pf::cuda
