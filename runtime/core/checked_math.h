// Size arithmetic on values that come from input. Every size computed from a file, a JSON field or
// a C API argument goes through these: on overflow they throw kInvalidArgument naming `what`
// instead of wrapping to a small number that an allocation would then trust.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/core/error.h"

namespace pf {

inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    fail(ErrorCode::kInvalidArgument, what, ": ", a, " * ", b, " overflows a 64-bit size");
  }
  return out;
}

inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    fail(ErrorCode::kInvalidArgument, what, ": ", a, " + ", b, " overflows a 64-bit size");
  }
  return out;
}

// The end of the byte range [offset, offset + length) if it lies within [0, size]; otherwise
// throws `code` naming `what`. Never wraps, whatever the three values.
inline uint64_t checked_range_end(uint64_t offset, uint64_t length, uint64_t size, std::string_view what,
                                  ErrorCode code = ErrorCode::kInvalidArgument) {
  if (offset > size || length > size - offset) {
    fail(code, what, ": bytes [", offset, ", ", offset, " + ", length, ") are outside the ", size,
         " available");
  }
  return offset + length;
}

}  // namespace pf
