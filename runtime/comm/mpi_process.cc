#include "runtime/comm/mpi_process.h"

#include <mpi.h>

#include <cstdlib>
#include <string>

#include "runtime/comm/mpi_status.h"
#include "runtime/core/error.h"

namespace pf::comm {

namespace {

bool finalizing = false;  // guarded by mpi_background_mutex()

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

// Lives in a function-local static: constructed on first use, destroyed (finalising MPI) at exit,
// after every static constructed later (the process-wide MpiWorld among them).
class MpiProcess {
 public:
  MpiProcess() {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      error_ = "MPI was finalised already in this process";
      return;
    }
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        error_ = "MPI_Init_thread failed: " + mpi_error_string(rc);
        return;
      }
      owned_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      error_ = std::string("the MPI library gives thread level ") + thread_level_name(provided) +
               "; PipeForge needs MPI_THREAD_MULTIPLE (an Open MPI built with thread support)";
      return;
    }
    const int rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rc != MPI_SUCCESS) error_ = "MPI_Comm_set_errhandler failed: " + mpi_error_string(rc);
  }
  ~MpiProcess() {
    {
      std::lock_guard<std::mutex> lock(mpi_background_mutex());
      finalizing = true;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Finalize();
  }
  const std::string& error() const { return error_; }

 private:
  bool owned_ = false;
  std::string error_;
};

}  // namespace

std::mutex& mpi_background_mutex() {
  static std::mutex* mutex = new std::mutex;  // never destroyed: used up to the last exit handler
  return *mutex;
}

bool mpi_finalizing() { return finalizing; }

void ensure_mpi_initialized() {
  static MpiProcess process;
  if (!process.error().empty()) fail(ErrorCode::kMpiError, process.error());
  int finalized = 0;
  MPI_Finalized(&finalized);
  PF_CHECK_STATE(!finalized, "MPI was finalised already in this process");
}

}  // namespace pf::comm
