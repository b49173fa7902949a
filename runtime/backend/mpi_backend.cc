#include "runtime/backend/mpi_backend.h"

#include "runtime/backend/backend_slot.h"

namespace pf {
namespace {

backend::BackendSlot<MpiBackend>& slot() {
  static backend::BackendSlot<MpiBackend> slot(backend::kMpiBackend, kMpiBackendInterfaceRevision);
  return slot;
}

}  // namespace

void register_mpi_backend(MpiBackend* backend, int interface_revision) { slot().offer(backend, interface_revision); }

MpiBackend& mpi_backend() {
  return slot().get(ErrorCode::kMpiError, "one process per rank needs Open MPI",
                    " (install Open MPI 4, e.g. Debian's libopenmpi3 and openmpi-bin)");
}

}  // namespace pf
