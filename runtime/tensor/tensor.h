// A dense, contiguous, row-major tensor: shared storage plus dtype, shape and device.
// Copying a Tensor shares its storage (like a handle); clone() copies the data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor/allocator.h"
#include "runtime/tensor/dtype.h"

namespace pf {

using Shape = std::vector<int64_t>;
std::string shape_to_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised tensor charged to the thread's current memory category.
  static Tensor empty(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::kF32, Device device = Device::cpu());
  // A tensor holding a copy of `values` (f32), for tests and small constants.
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_ints(const Shape& shape, const std::vector<int32_t>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;  // negative i counts from the end
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  // Bytes of the underlying allocation (what the memory tracker charged).
  size_t storage_bytes() const { return storage_ ? storage_->bytes() : 0; }
  const Storage* storage() const { return storage_.get(); }

  template <typename T>
  T* data() const {
    return reinterpret_cast<T*>(static_cast<char*>(storage_->data()) + offset_bytes_);
  }
  float* f32() const;        // checks dtype == f32
  int32_t* i32() const;      // checks dtype == i32

  // Same storage, new shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Host-side operations. On tensors of another device (CUDA) they go through the device's
  // registered copy hook (register_device_memory_ops in allocator.h: staged through host memory
  // where a conversion is needed) or throw kInvalidArgument naming the device when no runtime for
  // it is linked; host code never dereferences device memory.
  Tensor clone() const;  // same device
  // Converts to another dtype (f32 <-> bf16/f16), copying; same device.
  Tensor to(DType dtype) const;
  void fill(float value) const;                // f32
  void copy_from(const Tensor& other) const;  // same shape and dtype; any two devices
  std::vector<float> to_vector() const;       // f32 (or converted) copy
  // A copy on `device` (always a new storage, even when `device` is this tensor's device), charged
  // to the thread's current memory category.
  Tensor to_device(const Device& device) const;
  // This tensor when it is on the CPU (the same storage, no copy), else a copy on the host: for
  // host code that only reads a tensor of any device.
  Tensor to_host() const;

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_ = Device::cpu();
};

// The index of the first NaN or infinity among the `n` floats at `values` (any alignment), or -1
// when every value is finite.
int64_t first_non_finite(const void* values, int64_t n);
// The same over a tensor's values (f32; a tensor on another device is copied to the host first).
int64_t first_non_finite(const Tensor& t);

}  // namespace pf
