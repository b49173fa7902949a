// Every exported function runs its body inside guard(): C++ exceptions become pf_status objects
// (pf::Error keeps its code, std::bad_alloc is PF_OUT_OF_MEMORY, anything else PF_INTERNAL) and the
// message is prefixed with the function's name. Nothing unwinds into C.
#pragma once

#include <string>

#include "c_api/pipeforge.h"
#include "runtime/core/error.h"

struct pf_status {
  pf_code code;
  std::string message;
};

namespace pf::capi {

// A status, or the static out-of-memory status when even that allocation fails.
pf_status* make_status(pf_code code, std::string message) noexcept;
// Whether `status` is the static out-of-memory status (which pf_status_destroy must not free).
bool is_static_status(const pf_status* status) noexcept;
// The status for the exception currently being handled.
pf_status* status_from_current_exception(const char* function) noexcept;
// Logs and swallows the exception currently being handled (for functions that return void).
void log_current_exception(const char* function) noexcept;

template <typename Body>
pf_status* guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (...) {
    return status_from_current_exception(function);
  }
}

template <typename Body>
void guard_void(const char* function, Body&& body) noexcept {
  try {
    body();
  } catch (...) {
    log_current_exception(function);
  }
}

// Throws kInvalidArgument "argument '<name>' is NULL" when `pointer` is NULL; returns it otherwise.
template <typename T>
T* require(T* pointer, const char* name) {
  if (pointer == nullptr) fail(ErrorCode::kInvalidArgument, "argument '", name, "' is NULL");
  return pointer;
}

// A C string argument that must be non-NULL (and, if `allow_empty` is false, non-empty).
std::string require_string(const char* text, const char* name, bool allow_empty = false);

}  // namespace pf::capi
