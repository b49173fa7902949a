#include "c_api/guard.h"

#include <new>
#include <stdexcept>

#include "runtime/core/log.h"

namespace pf::capi {
namespace {

static_assert(static_cast<int>(PF_INTERNAL) == static_cast<int>(ErrorCode::kInternal) &&
                  static_cast<int>(PF_CALLBACK_ERROR) == static_cast<int>(ErrorCode::kCallbackError) &&
                  static_cast<int>(PF_INVALID_ARGUMENT) == static_cast<int>(ErrorCode::kInvalidArgument) &&
                  static_cast<int>(PF_OUT_OF_MEMORY) == static_cast<int>(ErrorCode::kOutOfMemory),
              "pf_code must mirror pf::ErrorCode");

// Returned when allocating a status fails; never freed.
pf_status* static_out_of_memory() noexcept {
  static pf_status* status = new pf_status{PF_OUT_OF_MEMORY, "out of memory (while reporting an error)"};
  return status;
}

std::string with_function(const char* function, const std::string& message) {
  return std::string(function) + ": " + message;
}

}  // namespace

pf_status* make_status(pf_code code, std::string message) noexcept {
  try {
    return new pf_status{code, std::move(message)};
  } catch (...) {
    return static_out_of_memory();
  }
}

bool is_static_status(const pf_status* status) noexcept { return status == static_out_of_memory(); }

pf_status* status_from_current_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    const int code = static_cast<int>(e.code());
    // kOk should never be thrown; report it as internal rather than as success.
    const pf_code c = code > 0 && code <= PF_INTERNAL ? static_cast<pf_code>(code) : PF_INTERNAL;
    try {
      return make_status(c, with_function(function, e.what()));
    } catch (...) {
      return static_out_of_memory();
    }
  } catch (const std::bad_alloc&) {
    try {
      return make_status(PF_OUT_OF_MEMORY, with_function(function, "out of memory"));
    } catch (...) {
      return static_out_of_memory();
    }
  } catch (const std::exception& e) {
    try {
      return make_status(PF_INTERNAL, with_function(function, std::string("internal error: ") + e.what()));
    } catch (...) {
      return static_out_of_memory();
    }
  } catch (...) {
    try {
      return make_status(PF_INTERNAL, with_function(function, "internal error: unknown exception"));
    } catch (...) {
      return static_out_of_memory();
    }
  }
}

void log_current_exception(const char* function) noexcept {
  pf_status* status = status_from_current_exception(function);
  try {
    log(LogLevel::kError, status->message);
  } catch (...) {
  }
  if (!is_static_status(status)) delete status;
}

std::string require_string(const char* text, const char* name, bool allow_empty) {
  require(text, name);
  std::string value(text);
  PF_CHECK_ARG(allow_empty || !value.empty(), "argument '", name, "' is empty");
  return value;
}

}  // namespace pf::capi
