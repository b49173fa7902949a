// One process per rank, as the runtime sees it: the MPI backend, an interface with no MPI type in
// it. Its one implementation (runtime/backend/mpi/) is the only code that links Open MPI; it lives
// in libpipeforge_mpi.so.<abi>, loaded the first time a process-per-rank World is asked for (so a
// machine without Open MPI trains in one process), or is linked in statically (the MPI tests).
// It registers itself (register_mpi_backend) from a static initializer. docs/BACKENDS.md.
#pragma once

#include <memory>

#include "runtime/comm/process_grid.h"
#include "runtime/comm/world.h"

namespace pf {

// Bumped whenever this interface changes; a backend built against another revision is refused.
constexpr int kMpiBackendInterfaceRevision = 2;

class MpiBackend {
 public:
  virtual ~MpiBackend() = default;
  // The whole launch (MPI_COMM_WORLD). Initialises MPI on first use (MPI_THREAD_MULTIPLE) and
  // finalises it at exit; kMpiError when it cannot.
  virtual std::shared_ptr<comm::World> launch_world() = 0;
  // Collective over `launch` (a World from launch_world): T x D x P processes as D pipeline
  // replicas of P ranks, each rank T tensor-parallel members (comm::make_process_grid's layout);
  // kInvalidArgument unless its size is tensor_ranks * replicas * pipeline_ranks.
  virtual comm::ProcessGrid process_grid(comm::World& launch, int tensor_ranks, int replicas, int pipeline_ranks) = 0;
};

// The MPI backend: the registered one, else libpipeforge_mpi.so.<abi> loaded now. Throws kMpiError
// "one process per rank needs Open MPI: <why>" when it cannot be loaded.
MpiBackend& mpi_backend();

// Called once by the backend implementation from a static initializer.
void register_mpi_backend(MpiBackend* backend, int interface_revision);

}  // namespace pf
