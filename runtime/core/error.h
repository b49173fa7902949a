// Errors inside the runtime are C++ exceptions of one type, carrying a code that maps 1:1 onto the
// C API's pf_code. The C API turns them into pf_status objects; nothing unwinds through C.
#pragma once

#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pf {

enum class ErrorCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kFailedPrecondition = 2,
  kOutOfMemory = 3,
  kNotFound = 4,
  kIoError = 5,
  kDataLoss = 6,
  kCudaError = 7,
  kCublasError = 8,
  kNcclError = 9,
  kMpiError = 10,
  kCallbackError = 11,
  kTimeout = 12,
  kCancelled = 13,
  kUnimplemented = 14,
  kInternal = 15,
};

const char* error_code_name(ErrorCode code);

// The message of a caught exception (what(), or "unknown exception" for other types).
std::string describe_exception(std::exception_ptr e);

// The message has its control characters escaped (escape_control_characters): errors echo input,
// and whoever prints them (the CLI, a binding, a C caller) gets text a terminal shows as text.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

// Throws pf::Error(code, <all arguments streamed together>).
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, const Args&... args) {
  throw Error(code, detail::concat(args...));
}

}  // namespace pf

// PF_CHECK_ARG(cond, message parts...) throws kInvalidArgument when cond is false.
#define PF_CHECK_ARG(cond, ...)                                   \
  do {                                                            \
    if (!(cond)) ::pf::fail(::pf::ErrorCode::kInvalidArgument, __VA_ARGS__); \
  } while (0)

// PF_CHECK_STATE(cond, ...) throws kFailedPrecondition when cond is false.
#define PF_CHECK_STATE(cond, ...)                                 \
  do {                                                            \
    if (!(cond)) ::pf::fail(::pf::ErrorCode::kFailedPrecondition, __VA_ARGS__); \
  } while (0)

// PF_INTERNAL_CHECK(cond, ...) guards the runtime's own invariants.
#define PF_INTERNAL_CHECK(cond, ...)                                             \
  do {                                                                           \
    if (!(cond))                                                                 \
      ::pf::fail(::pf::ErrorCode::kInternal, __FILE__, ":", __LINE__, ": ", __VA_ARGS__); \
  } while (0)
