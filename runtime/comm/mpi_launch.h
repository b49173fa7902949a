// Whether this process was started by an MPI launcher. Reads the environment only: no MPI library is
// needed to ask (the MPI backend, runtime/backend/mpi_backend.h, is loaded once one is used).
#pragma once

namespace pf::comm {

// True when this process was started by an MPI launcher (mpirun/mpiexec, srun with PMIx/PMI):
// OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE is set.
bool launched_by_mpi();

}  // namespace pf::comm
