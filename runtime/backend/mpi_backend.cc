#include "runtime/backend/mpi_backend.h"

#include <atomic>
#include <mutex>
#include <string>

#include "runtime/backend/loader.h"
#include "runtime/core/error.h"

namespace pf {
namespace {

std::atomic<MpiBackend*> registered{nullptr};
std::mutex refusal_mutex;
std::string refusal;

}  // namespace

void register_mpi_backend(MpiBackend* backend, int interface_revision) {
  if (interface_revision != kMpiBackendInterfaceRevision) {
    std::lock_guard<std::mutex> lock(refusal_mutex);
    refusal = "it was built against MPI backend interface revision " + std::to_string(interface_revision) +
              " and this runtime has revision " + std::to_string(kMpiBackendInterfaceRevision) +
              " (use the backend of the same build)";
    return;
  }
  registered.store(backend);
}

MpiBackend& mpi_backend() {
  if (MpiBackend* b = registered.load()) return *b;
  const std::string error = backend::load_backend_library("mpi", backend::kMpiBackendLibrary, /*global=*/true);
  if (MpiBackend* b = registered.load()) return *b;
  std::string why = error;
  if (why.empty()) {
    std::lock_guard<std::mutex> lock(refusal_mutex);
    why = std::string(backend::kMpiBackendLibrary) + " loaded, but " +
          (refusal.empty() ? std::string("it registered no backend") : "it was refused: " + refusal);
  }
  fail(ErrorCode::kMpiError, "one process per rank needs Open MPI: ", why,
       " (install Open MPI 4, e.g. Debian's libopenmpi3 and openmpi-bin)");
}

}  // namespace pf
