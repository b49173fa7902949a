#include "runtime/comm/process_grid.h"

#include "runtime/comm/mpi_world.h"

#include "runtime/core/error.h"

namespace pf::comm {

ProcessGrid make_process_grid(MpiWorld& launch, int replicas, int pipeline_ranks) {
  PF_CHECK_ARG(replicas >= 1 && pipeline_ranks >= 1, "process grid: replicas (", replicas, ") and pipeline ranks (",
               pipeline_ranks, ") must be >= 1");
  PF_CHECK_ARG(launch.size() == replicas * pipeline_ranks, "process grid: ", launch.describe(), " is one of ",
               launch.size(), " processes, but ", replicas, " replicas x ", pipeline_ranks,
               " pipeline ranks need ", replicas * pipeline_ranks, " (launch mpirun -np ", replicas * pipeline_ranks,
               ")");
  ProcessGrid g;
  g.replicas = replicas;
  g.pipeline_ranks = pipeline_ranks;
  g.replica = launch.rank() / pipeline_ranks;
  g.pipeline_rank = launch.rank() % pipeline_ranks;
  g.pipeline = launch.split(g.replica, g.pipeline_rank);
  g.data_parallel = launch.split(g.pipeline_rank, g.replica);
  return g;
}

}  // namespace pf::comm
