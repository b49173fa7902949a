#include "runtime/core/error.h"

#include <cstdio>

#include "runtime/core/control_characters.h"

namespace pf {

std::string escape_control_characters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    char escaped[8];
    if (c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9f) {  // a C1 control in UTF-8
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(text[++i]));
      out += escaped;
    } else if (c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f)) {
      out += static_cast<char>(c);
    } else if (c == '\r') {
      out += "\\r";
    } else {
      std::snprintf(escaped, sizeof escaped, "\\x%02x", c);
      out += escaped;
    }
  }
  return out;
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(escape_control_characters(message)), code_(code) {}

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "OK";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kOutOfMemory: return "OUT_OF_MEMORY";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kIoError: return "IO_ERROR";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
    case ErrorCode::kCudaError: return "CUDA_ERROR";
    case ErrorCode::kCublasError: return "CUBLAS_ERROR";
    case ErrorCode::kNcclError: return "NCCL_ERROR";
    case ErrorCode::kMpiError: return "MPI_ERROR";
    case ErrorCode::kCallbackError: return "CALLBACK_ERROR";
    case ErrorCode::kTimeout: return "TIMEOUT";
    case ErrorCode::kCancelled: return "CANCELLED";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string describe_exception(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace pf
