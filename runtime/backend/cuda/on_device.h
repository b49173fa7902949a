// What every tensor-level operation of the CUDA backend starts with: the tensor's device made
// current for the scope, the thread's current stream on it, and allocation helpers.
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/core/error.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/tensor/tensor.h"

namespace pf::cuda {

class OnDevice {
 public:
  explicit OnDevice(const Tensor& t)
      : device_(t.device()), scope_(t.device().ordinal), stream_(current_stream_for(t.device().ordinal)) {
    PF_INTERNAL_CHECK(device_.kind == DeviceKind::kCuda, "gpu op called with a tensor on ", device_.to_string());
  }
  const Device& device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // An uninitialised f32 tensor on this device, charged to the thread's memory category.
  Tensor empty(const Shape& shape, DType dtype = DType::kF32) const { return Tensor::empty(shape, dtype, device_); }
  // Scratch memory of at least `bytes`, charged to kWorkspace. Dropping it right after the
  // kernels were enqueued is safe: the caching allocator reuses a block only after the work issued
  // on the freeing thread's current stream (this stream) before the free has completed.
  Tensor workspace(size_t bytes) const {
    MemoryCategoryScope category(MemoryCategory::kWorkspace);
    return Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::kF32, device_);
  }

 private:
  Device device_;
  DeviceScope scope_;
  cudaStream_t stream_;
};

inline const float* ptr(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
inline float* mut(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace pf::cuda
