#include "runtime/backend/cuda_backend.h"

#include "runtime/backend/backend_slot.h"
#include "runtime/core/error.h"

namespace pf {
namespace {

backend::BackendSlot<CudaBackend>& slot() {
  static backend::BackendSlot<CudaBackend> slot(backend::kCudaBackend, kCudaBackendInterfaceRevision);
  return slot;
}

}  // namespace

void register_cuda_backend(CudaBackend* backend, int interface_revision) { slot().offer(backend, interface_revision); }

CudaBackend& cuda_backend() {
  return slot().get(ErrorCode::kCudaError, "the CUDA backend is not available",
                    " (CPU training needs none; for GPUs install the CUDA 13 runtime, cuBLAS and NCCL)");
}

CudaAvailability probe_cuda() {
  try {
    return cuda_backend().probe();
  } catch (const std::exception& e) {
    CudaAvailability none;
    none.reason = e.what();
    return none;
  }
}

void require_cuda_device(int ordinal, const std::string& who, const CudaAvailability& availability) {
  const std::string name = "cuda:" + std::to_string(ordinal);
  if (availability.device_count == 0)
    fail(ErrorCode::kInvalidArgument, who, ": ", name, " is not available: no CUDA device is visible to this process",
         availability.reason.empty() ? std::string() : " (" + availability.reason + ")");
  PF_CHECK_ARG(ordinal >= 0 && ordinal < availability.device_count, who, ": ", name, " does not exist (",
               availability.device_count, " CUDA device(s) visible: cuda:0 to cuda:", availability.device_count - 1,
               ")");
}

}  // namespace pf
