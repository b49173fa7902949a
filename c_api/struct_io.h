// Reading and writing the versioned structs that cross the C ABI (they start with
// `uint32_t struct_size`). A caller compiled against an older header passes a shorter struct: the
// fields it does not cover keep their defaults. A caller compiled against a newer header passes a
// longer one: accepted only when the fields this library does not know are all zero, so a setting
// the library cannot honour is never silently dropped.
//
// Rule for extending a struct: append fields after the previous version's sizeof (not into its
// trailing padding), so every older sizeof ends on a field boundary.
//
// No struct will ever grow past kMaxStructSize bytes (the largest is 280 today): a larger
// struct_size is refused before a byte past sizeof is read or written (0xFFFFFFFF, an unset
// field, used to read or zero 4 GiB of the caller's memory).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/core/error.h"

namespace pf::capi {

inline constexpr size_t kMaxStructSize = 4096;

// The check every struct_size passes first: at least version 1's size, at most kMaxStructSize.
inline void check_struct_size_range(size_t size, size_t v1_size, const char* what, const char* type_name,
                                    const char* hint) {
  PF_CHECK_ARG(size >= v1_size, what, "->struct_size is ", size, ", smaller than version 1 of ", type_name, " (",
               v1_size, " bytes); set it to sizeof(", type_name, ")", hint);
  PF_CHECK_ARG(size <= kMaxStructSize, what, "->struct_size is ", size, ", larger than any version of ", type_name,
               " will be (at most ", kMaxStructSize, " bytes); set it to sizeof(", type_name, ")", hint);
}

// Checks struct_size of a struct the caller passes in (`what` names it, e.g. "options").
template <typename T>
void check_struct_size(const T& in, size_t v1_size, const char* what, const char* type_name) {
  const size_t size = in.struct_size;
  check_struct_size_range(size, v1_size, what, type_name, " or use the _init function");
  if (size > sizeof(T)) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(&in);
    for (size_t i = sizeof(T); i < size; ++i) {
      PF_CHECK_ARG(bytes[i] == 0, what, "->struct_size is ", size, ", larger than this library's ",
                   type_name, " (", sizeof(T), " bytes), and the newer fields are set: the library "
                   "is older than the header the caller was compiled with");
    }
  }
}

// Returns `defaults` overwritten by the part of `in` that the caller's struct_size covers.
template <typename T>
T read_struct(const T& in, size_t v1_size, const char* what, const char* type_name, T defaults) {
  check_struct_size(in, v1_size, what, type_name);
  std::memcpy(static_cast<void*>(&defaults), &in, std::min<size_t>(in.struct_size, sizeof(T)));
  defaults.struct_size = static_cast<uint32_t>(sizeof(T));
  return defaults;
}

// Checks an out-struct before any work is done, so a bad one leaves everything untouched.
template <typename T>
void check_out_struct(const T& out, size_t v1_size, const char* what, const char* type_name) {
  check_struct_size_range(out.struct_size, v1_size, what, type_name, "");
}

// Writes `value` into the caller's struct: the fields that fit in its struct_size; a longer
// (newer) struct gets zeros in the fields this library does not know. struct_size is kept.
template <typename T>
void write_struct(T* out, T value) {
  const size_t size = out->struct_size;
  value.struct_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &value, std::min<size_t>(size, sizeof(T)));
  if (size > sizeof(T)) std::memset(reinterpret_cast<unsigned char*>(out) + sizeof(T), 0, size - sizeof(T));
}

}  // namespace pf::capi
