// Where the ranks of a C API trainer run (pf_trainer_options.processes, since 0.3): threads of this
// process, or one process per rank of an MPI launch arranged as data_parallel replicas of the
// schedule's P ranks, each rank tensor_parallel processes (comm::make_process_grid's layout). The same decisions `pipeforge train` makes under mpirun
// (tools/cli/train_command.cc), made from the options struct instead of the command line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/comm/world.h"

namespace pf::capi {

struct ProcessLaunch {
  bool per_rank = false;                       // one process per rank
  int launch_rank = 0;                         // this process in the launch (0 for threads)
  int launch_size = 1;                         // the launch's processes (1 for threads)
  std::shared_ptr<comm::World> pipeline;       // this replica's P processes; null for threads
  std::shared_ptr<comm::World> data_parallel;  // the D processes that run this pipeline rank
  std::shared_ptr<comm::World> tensor_parallel;  // the T members of this process's tensor-parallel group
};

// Decides from `processes` (a pf_processes value), whether a schedule is set, the tensor-parallel
// size T, the replicas D and the schedule's pipeline ranks P (asked only when needed: it may parse
// a schedule text), and makes the process groups. Processes are for a schedule or for T > 1 (the
// sequential trainer, each process a member). With one process per rank this is collective over
// the launch. Throws kInvalidArgument for a bad value, a launch of the wrong size (naming mpirun -np
// T*D*P) and
// data_parallel > 1 with a schedule on threads; kFailedPrecondition for PF_PROCESSES_MPI, or data
// parallelism under PF_PROCESSES_AUTO, without an MPI launch; kMpiError when MPI cannot start.
ProcessLaunch launch_processes(int32_t processes, bool has_schedule, int tensor_ranks, int replicas,
                               const std::function<int()>& pipeline_ranks);

}  // namespace pf::capi
