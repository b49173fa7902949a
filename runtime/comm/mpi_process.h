// MPI's per-process state: initialised once (MPI_THREAD_MULTIPLE) the first time a process-per-rank
// World is made, finalised at process exit when this library initialised it.
#pragma once

#include <mutex>

#include "runtime/comm/mpi_launch.h"

namespace pf::comm {


// Initialises MPI with MPI_THREAD_MULTIPLE unless it is initialised already, and sets
// MPI_ERRORS_RETURN on MPI_COMM_WORLD. Thread-safe; the work happens once per process. Throws
// kMpiError when initialisation failed or the library gives a lower thread level than
// MPI_THREAD_MULTIPLE (executors call MPI from a worker thread while the main thread runs
// collectives), and kFailedPrecondition after MPI_Finalize.
void ensure_mpi_initialized();

// Background threads that call MPI on their own (MpiTransport's progress thread) hold this lock
// around each call and stop once mpi_finalizing() (read under it) says so: the MPI_Finalize at
// exit takes the lock first, so no such call overlaps it.
std::mutex& mpi_background_mutex();
bool mpi_finalizing();

}  // namespace pf::comm
