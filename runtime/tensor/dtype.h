// Element types. Compute is f32; bf16 and f16 are storage formats (converted on load/store);
// i32 carries token ids and class labels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace pf {

enum class DType : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
// Parses "f32", "bf16", "f16", "i32"; throws kInvalidArgument naming the text otherwise.
DType parse_dtype(const std::string& name);

// Round-to-nearest-even conversions used for bf16/f16 storage.
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);

}  // namespace pf
