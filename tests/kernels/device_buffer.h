// A tiny RAII owner of device memory for the kernel tests (plain cudaMalloc / cudaFree; the tests
// do not depend on the runtime's allocator), plus host <-> device copies and bf16 helpers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"

namespace pf::test {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count_ > 0) PF_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), count_ * sizeof(T)));
    zero();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), count_(other.count_) {
    other.ptr_ = nullptr;
    other.count_ = 0;
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }

  void zero() {
    if (count_ > 0) PF_CUDA_CHECK(cudaMemset(ptr_, 0, count_ * sizeof(T)));
  }
  void upload(const std::vector<T>& host) {
    if (count_ > 0) PF_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Synchronises the device first, so kernel errors surface here.
  std::vector<T> download() const {
    PF_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    if (count_ > 0) PF_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Untyped scratch (workspaces).
class DeviceBytes : public DeviceBuffer<unsigned char> {
 public:
  explicit DeviceBytes(size_t bytes) : DeviceBuffer<unsigned char>(bytes) {}
  void* ptr() const { return get(); }
};

inline std::vector<cuda::bf16> to_bf16(const std::vector<float>& v) {
  std::vector<cuda::bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cuda::from_f32<cuda::bf16>(v[i]);
  return out;
}
inline std::vector<float> to_f32(const std::vector<cuda::bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = cuda::to_f32(v[i]);
  return out;
}
// Rounds every value to bf16 and back (the CPU reference of a bf16 run uses these inputs).
inline std::vector<float> round_bf16(const std::vector<float>& v) { return to_f32(to_bf16(v)); }

// Uploads f32 values as T (float: as is; bf16: rounded) and downloads as f32.
template <typename T>
DeviceBuffer<T> upload_as(const std::vector<float>& v);
template <>
inline DeviceBuffer<float> upload_as<float>(const std::vector<float>& v) { return DeviceBuffer<float>(v); }
template <>
inline DeviceBuffer<cuda::bf16> upload_as<cuda::bf16>(const std::vector<float>& v) {
  return DeviceBuffer<cuda::bf16>(to_bf16(v));
}
inline std::vector<float> download_f32(const DeviceBuffer<float>& b) { return b.download(); }
inline std::vector<float> download_f32(const DeviceBuffer<cuda::bf16>& b) { return to_f32(b.download()); }

}  // namespace pf::test
