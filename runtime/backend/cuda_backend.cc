#include "runtime/backend/cuda_backend.h"

#include <atomic>
#include <mutex>

#include "runtime/backend/loader.h"
#include "runtime/core/error.h"

namespace pf {
namespace {

std::atomic<CudaBackend*> registered{nullptr};
std::mutex refusal_mutex;
std::string refusal;  // why a backend that registered was refused

}  // namespace

void register_cuda_backend(CudaBackend* backend, int interface_revision) {
  if (interface_revision != kCudaBackendInterfaceRevision) {
    std::lock_guard<std::mutex> lock(refusal_mutex);
    refusal = "it was built against CUDA backend interface revision " + std::to_string(interface_revision) +
              " and this runtime has revision " + std::to_string(kCudaBackendInterfaceRevision) +
              " (use the backend of the same build)";
    return;
  }
  registered.store(backend);
}

CudaBackend* cuda_backend_if_present() { return registered.load(); }

CudaBackend& cuda_backend() {
  if (CudaBackend* b = registered.load()) return *b;
  const std::string error = backend::load_backend_library("cuda", backend::kCudaBackendLibrary);
  if (CudaBackend* b = registered.load()) return *b;
  std::string why = error;
  if (why.empty()) {
    std::lock_guard<std::mutex> lock(refusal_mutex);
    why = std::string(backend::kCudaBackendLibrary) + " loaded, but " +
          (refusal.empty() ? std::string("it registered no backend") : "it was refused: " + refusal);
  }
  fail(ErrorCode::kCudaError, "the CUDA backend is not available: ", why,
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
