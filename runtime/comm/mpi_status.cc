#include "runtime/comm/mpi_status.h"

#include <mpi.h>

#include "runtime/core/error.h"

namespace pf::comm {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS || length <= 0) {
    return "MPI error " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(length));
}

void mpi_check(int rc, const char* call, int rank, int peer) {
  if (rc == MPI_SUCCESS) return;
  const std::string who = rank >= 0 ? "rank " + std::to_string(rank) + ": " : "";
  const std::string with = peer >= 0 ? " (peer rank " + std::to_string(peer) + ")" : "";
  fail(ErrorCode::kMpiError, who, call, with, " failed: ", mpi_error_string(rc));
}

}  // namespace pf::comm
