#include "runtime/devices/cuda/cuda_status.h"

namespace pf::cuda {
namespace {

std::string with_context(const std::string& context, const std::string& what) {
  return context.empty() ? what : context + ": " + what;
}

const char* or_unknown(const char* s) { return s != nullptr ? s : "unknown"; }

// NCCL result names (ncclGetErrorString gives the description only).
const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult";
  }
}

}  // namespace

ErrorCode cuda_error_code(cudaError_t err) {
  return err == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCudaError;
}

std::string cuda_error_message(cudaError_t err, const std::string& context) {
  return with_context(context, std::string("CUDA error ") + or_unknown(cudaGetErrorName(err)) + " (" +
                                   or_unknown(cudaGetErrorString(err)) + ")");
}

ErrorCode cublas_error_code(cublasStatus_t status) {
  return status == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::kOutOfMemory : ErrorCode::kCublasError;
}

std::string cublas_error_message(cublasStatus_t status, const std::string& context) {
  return with_context(context, std::string("cuBLAS error ") + or_unknown(cublasGetStatusName(status)) +
                                   " (" + or_unknown(cublasGetStatusString(status)) + ")");
}

std::string nccl_error_message(ncclResult_t result, const std::string& context) {
  std::string what = std::string("NCCL error ") + nccl_result_name(result) + " (" +
                     or_unknown(ncclGetErrorString(result)) + ")";
  if (result != ncclSuccess) {
    const char* last = ncclGetLastError(nullptr);
    if (last != nullptr && last[0] != '\0') what += std::string(": ") + last;
  }
  return with_context(context, what);
}

void throw_cuda_error(cudaError_t err, const std::string& context) {
  (void)cudaGetLastError();  // clear a non-sticky error; sticky ones stay whatever we do
  throw Error(cuda_error_code(err), cuda_error_message(err, context));
}

void throw_cublas_error(cublasStatus_t status, const std::string& context) {
  throw Error(cublas_error_code(status), cublas_error_message(status, context));
}

void throw_nccl_error(ncclResult_t result, const std::string& context) {
  throw Error(ErrorCode::kNcclError, nccl_error_message(result, context));
}

}  // namespace pf::cuda
