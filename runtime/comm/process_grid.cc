#include "runtime/comm/process_grid.h"

#include "runtime/comm/mpi_world.h"

#include "runtime/core/error.h"

namespace pf::comm {

ProcessGrid make_process_grid(MpiWorld& launch, int tensor_ranks, int replicas, int pipeline_ranks) {
  PF_CHECK_ARG(tensor_ranks >= 1 && replicas >= 1 && pipeline_ranks >= 1, "process grid: tensor-parallel ranks (",
               tensor_ranks, "), replicas (", replicas, ") and pipeline ranks (", pipeline_ranks, ") must be >= 1");
  const int needed = tensor_ranks * replicas * pipeline_ranks;
  PF_CHECK_ARG(launch.size() == needed, "process grid: ", launch.describe(), " is one of ", launch.size(),
               " processes, but ", tensor_ranks, " tensor-parallel ranks x ", replicas, " replicas x ",
               pipeline_ranks, " pipeline ranks need ", needed, " (launch mpirun -np ", needed, ")");
  ProcessGrid g;
  g.tensor_ranks = tensor_ranks;
  g.replicas = replicas;
  g.pipeline_ranks = pipeline_ranks;
  const int w = launch.rank();
  g.tensor_rank = w % tensor_ranks;
  g.replica = w / tensor_ranks % replicas;
  g.pipeline_rank = w / (tensor_ranks * replicas);
  // split(color, key): the members of one group share the color and are ordered by the key.
  g.pipeline = launch.split(g.tensor_rank + tensor_ranks * g.replica, g.pipeline_rank);
  g.data_parallel = launch.split(g.tensor_rank + tensor_ranks * g.pipeline_rank, g.replica);
  g.tensor_parallel = launch.split(g.replica + replicas * g.pipeline_rank, g.tensor_rank);
  return g;
}

}  // namespace pf::comm
