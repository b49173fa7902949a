#include "c_api/process_launch.h"

#include <string>

#include "c_api/pipeforge.h"
#include "runtime/backend/mpi_backend.h"
#include "runtime/comm/mpi_launch.h"
#include "runtime/core/error.h"

namespace pf::capi {
namespace {

std::string np(int processes) { return "mpirun -np " + std::to_string(processes); }

}  // namespace

ProcessLaunch launch_processes(int32_t processes, bool has_schedule, int tensor_ranks, int replicas,
                               const std::function<int()>& pipeline_ranks) {
  PF_CHECK_ARG(processes == PF_PROCESSES_AUTO || processes == PF_PROCESSES_THREADS || processes == PF_PROCESSES_MPI,
               "options->processes is ", processes,
               ", not a pf_processes (PF_PROCESSES_AUTO, PF_PROCESSES_THREADS or PF_PROCESSES_MPI)");
  ProcessLaunch out;
  std::shared_ptr<comm::World> launch;
  const bool per_process = has_schedule || tensor_ranks > 1;
  const auto all = [&] { return tensor_ranks * replicas * (has_schedule ? pipeline_ranks() : 1); };
  if (processes == PF_PROCESSES_MPI) {
    PF_CHECK_ARG(per_process, "options->processes is PF_PROCESSES_MPI but no schedule is set: each process runs "
                 "one rank of a schedule (set options->schedule or options->schedule_text) or is one member of "
                 "a tensor-parallel group (config entry tensor_parallel)");
    PF_CHECK_STATE(comm::launched_by_mpi(), "options->processes is PF_PROCESSES_MPI (one process per rank) but this "
                   "process was not launched by mpirun: start every process with ", np(all()), " ...");
    launch = mpi_backend().launch_world();
  } else if (processes == PF_PROCESSES_AUTO && per_process && comm::launched_by_mpi()) {
    launch = mpi_backend().launch_world();
    if (launch->size() == 1) launch = nullptr;  // `mpirun -np 1`: threads, as without mpirun
  }
  if (!launch) {
    if (has_schedule && replicas > 1) {
      const bool launched = comm::launched_by_mpi();
      const std::string what = "options->data_parallel is " + std::to_string(replicas) +
                               " with a schedule: data parallelism needs one process per rank; launch " +
                               np(all()) + " with options->processes " +
                               (processes == PF_PROCESSES_THREADS ? "PF_PROCESSES_MPI or PF_PROCESSES_AUTO"
                                                                  : "PF_PROCESSES_AUTO");
      if (processes == PF_PROCESSES_THREADS) fail(ErrorCode::kInvalidArgument, what, " (it is PF_PROCESSES_THREADS)");
      fail(ErrorCode::kFailedPrecondition, what,
           launched ? " (this launch has one process)" : " (this process was not launched by mpirun)");
    }
    return out;
  }
  const comm::ProcessGrid grid =
      mpi_backend().process_grid(*launch, tensor_ranks, replicas, has_schedule ? pipeline_ranks() : 1);
  out.per_rank = true;
  out.launch_rank = launch->rank();
  out.launch_size = launch->size();
  out.pipeline = grid.pipeline;
  out.data_parallel = grid.data_parallel;
  out.tensor_parallel = grid.tensor_parallel;
  return out;
}

}  // namespace pf::capi
