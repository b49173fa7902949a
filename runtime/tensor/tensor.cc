#include "runtime/tensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "runtime/core/checked_math.h"
#include "runtime/core/error.h"

namespace pf {

std::string shape_to_string(const Shape& shape) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << "]";
  return out.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) {
      fail(ErrorCode::kInvalidArgument, "shape ", shape_to_string(shape), " has more elements than a 64-bit size holds");
    }
  }
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) PF_CHECK_ARG(d >= 0, "negative dimension in shape ", shape_to_string(shape));
  checked_mul(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)),
              "bytes of a tensor of shape " + shape_to_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.device_ = device;
  t.storage_ = allocate_storage(t.nbytes(), device, current_memory_category());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  zero_bytes(t.data<char>(), device, t.nbytes(), "Tensor::zeros");
  return t;
}

Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  PF_CHECK_ARG(shape_numel(shape) == static_cast<int64_t>(values.size()), "shape ",
               shape_to_string(shape), " does not hold ", values.size(), " values");
  Tensor t = empty(shape, DType::kF32);
  // An empty vector's data() may be null, which memcpy must not be given even for 0 bytes.
  if (!values.empty()) std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_ints(const Shape& shape, const std::vector<int32_t>& values) {
  PF_CHECK_ARG(shape_numel(shape) == static_cast<int64_t>(values.size()), "shape ",
               shape_to_string(shape), " does not hold ", values.size(), " values");
  Tensor t = empty(shape, DType::kI32);
  if (!values.empty()) std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::dim(int i) const {
  int r = rank();
  int j = i < 0 ? i + r : i;
  PF_INTERNAL_CHECK(j >= 0 && j < r, "dim ", i, " out of range for shape ", shape_to_string(shape_));
  return shape_[j];
}

float* Tensor::f32() const {
  PF_INTERNAL_CHECK(dtype_ == DType::kF32, "expected an f32 tensor, got ", dtype_name(dtype_));
  return data<float>();
}

int32_t* Tensor::i32() const {
  PF_INTERNAL_CHECK(dtype_ == DType::kI32, "expected an i32 tensor, got ", dtype_name(dtype_));
  return data<int32_t>();
}

Tensor Tensor::reshape(const Shape& shape) const {
  PF_CHECK_ARG(shape_numel(shape) == numel(), "cannot reshape ", shape_to_string(shape_), " to ",
               shape_to_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  PF_CHECK_ARG(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [", begin, ", ",
               end, ") out of range for shape ", shape_to_string(shape_));
  Tensor t = *this;
  int64_t row = shape_numel(Shape(shape_.begin() + 1, shape_.end()));
  t.offset_bytes_ += static_cast<size_t>(begin * row) * dtype_size(dtype_);
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device_);
  copy_bytes(t.data<char>(), device_, data<char>(), device_, nbytes(), "Tensor::clone");
  return t;
}

Tensor Tensor::to_device(const Device& device) const {
  Tensor t = empty(shape_, dtype_, device);
  copy_bytes(t.data<char>(), device, data<char>(), device_, nbytes(), "Tensor::to_device");
  return t;
}

Tensor Tensor::to_host() const {
  return device_.kind == DeviceKind::kCpu ? *this : to_device(Device::cpu());
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return clone();
  if (device_.kind != DeviceKind::kCpu) {
    // No conversion kernels here: stage through host memory (the copy hook checks the device).
    return to_device(Device::cpu()).to(dtype).to_device(device_);
  }
  Tensor t = empty(shape_, dtype, device_);
  int64_t n = numel();
  if (dtype_ == DType::kF32) {
    const float* src = data<float>();
    if (dtype == DType::kBF16) {
      auto* dst = t.data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
      return t;
    }
    if (dtype == DType::kF16) {
      auto* dst = t.data<uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
      return t;
    }
  } else if (dtype == DType::kF32 && (dtype_ == DType::kBF16 || dtype_ == DType::kF16)) {
    const auto* src = data<uint16_t>();
    float* dst = t.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = dtype_ == DType::kBF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
    return t;
  }
  fail(ErrorCode::kInvalidArgument, "cannot convert ", dtype_name(dtype_), " to ", dtype_name(dtype));
}

void Tensor::fill(float value) const {
  if (device_.kind != DeviceKind::kCpu) {
    PF_INTERNAL_CHECK(dtype_ == DType::kF32, "expected an f32 tensor, got ", dtype_name(dtype_));
    std::vector<float> host(static_cast<size_t>(numel()), value);
    copy_bytes(data<char>(), device_, host.data(), Device::cpu(), nbytes(), "Tensor::fill");
    return;
  }
  float* p = f32();
  for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = value;
}

void Tensor::copy_from(const Tensor& other) const {
  PF_CHECK_ARG(other.shape_ == shape_ && other.dtype_ == dtype_, "copy from ",
               shape_to_string(other.shape_), " ", dtype_name(other.dtype_), " into ",
               shape_to_string(shape_), " ", dtype_name(dtype_));
  copy_bytes(data<char>(), device_, other.data<char>(), other.device_, nbytes(), "Tensor::copy_from");
}

std::vector<float> Tensor::to_vector() const {
  if (device_.kind != DeviceKind::kCpu) return to_device(Device::cpu()).to_vector();
  if (dtype_ == DType::kF32) return std::vector<float>(data<float>(), data<float>() + numel());
  if (dtype_ == DType::kI32) {
    std::vector<float> out(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) out[i] = static_cast<float>(data<int32_t>()[i]);
    return out;
  }
  return to(DType::kF32).to_vector();
}

int64_t first_non_finite(const void* values, int64_t n) {
  const char* bytes = static_cast<const char*>(values);
  // Blocks of a branch-free test (the exponent bits all set: NaN or infinity) that vectorises; the
  // element is looked for only in a block that has one.
  constexpr int64_t kBlock = 1024;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    uint32_t largest = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, bytes + i * 4, sizeof(bits));
      largest = std::max(largest, bits & 0x7fffffffu);
    }
    if (largest < 0x7f800000u) continue;
    for (int64_t i = begin; i < end; ++i) {
      float v;
      std::memcpy(&v, bytes + i * 4, sizeof(v));
      if (!std::isfinite(v)) return i;
    }
  }
  return -1;
}

int64_t first_non_finite(const Tensor& t) {
  if (t.device().kind == DeviceKind::kCpu && t.dtype() == DType::kF32) return first_non_finite(t.data<float>(), t.numel());
  const std::vector<float> host = t.to_vector();
  return first_non_finite(host.data(), static_cast<int64_t>(host.size()));
}

}  // namespace pf
