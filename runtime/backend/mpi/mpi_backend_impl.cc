// The MPI backend (mpi_backend.h's interface) on runtime/comm's MpiWorld and process grid, and the
// static initializer that registers it when this library is loaded or linked.
#include "runtime/backend/mpi_backend.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"

namespace pf::comm {
namespace {

class OpenMpiBackend final : public MpiBackend {
 public:
  std::shared_ptr<World> launch_world() override { return MpiWorld::world(); }
  ProcessGrid process_grid(World& launch, int tensor_ranks, int replicas, int pipeline_ranks) override {
    auto* mpi = dynamic_cast<MpiWorld*>(&launch);
    PF_CHECK_ARG(mpi != nullptr, "process grid: ", launch.describe(), " is not an MPI launch");
    return make_process_grid(*mpi, tensor_ranks, replicas, pipeline_ranks);
  }
};

// Registration stores a pointer only: MPI starts when launch_world() is first called.
const bool registered_at_load = [] {
  static OpenMpiBackend backend;
  register_mpi_backend(&backend, kMpiBackendInterfaceRevision);
  return true;
}();

}  // namespace
}  // namespace pf::comm
