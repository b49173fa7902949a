// MPI return codes as pf::Error kMpiError. Every MPI call of the library goes through mpi_check, so
// a failure names the call, this rank and the peer, with the library's own text (MPI_Error_string).
// Communicators are set to MPI_ERRORS_RETURN, so a failed call returns instead of aborting the job.
#pragma once

#include <string>

namespace pf::comm {

std::string mpi_error_string(int code);

// Throws kMpiError "rank R: MPI_Isend (peer rank P) failed: <text>" unless rc == MPI_SUCCESS.
// peer < 0: no peer (collectives); rank < 0: before the rank is known.
void mpi_check(int rc, const char* call, int rank, int peer = -1);

}  // namespace pf::comm
