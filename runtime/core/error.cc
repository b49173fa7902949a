#include "runtime/core/error.h"

namespace pf {

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
