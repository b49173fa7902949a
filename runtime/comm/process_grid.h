// One launch of D x P processes as D pipeline replicas of P ranks each (docs/EXECUTION.md,
// "Data parallel"). Layout: launch rank w is replica w / P, pipeline rank w % P, so a replica's
// ranks are consecutive (mpirun places consecutive ranks on one machine first).
#pragma once

#include <memory>

#include "runtime/comm/world.h"

namespace pf::comm {

struct ProcessGrid {
  int replicas = 1;                     // D
  int pipeline_ranks = 1;               // P
  int replica = 0;                      // this process's replica
  int pipeline_rank = 0;                // and its rank in that replica's pipeline
  std::shared_ptr<World> pipeline;      // the P processes of this replica
  std::shared_ptr<World> data_parallel; // the D processes with this pipeline rank
};

class MpiWorld;

// Collective over `launch`: kInvalidArgument unless its size is replicas * pipeline_ranks. Part of
// the MPI backend (runtime/backend/mpi): the runtime reaches it through mpi_backend().process_grid.
ProcessGrid make_process_grid(MpiWorld& launch, int replicas, int pipeline_ranks);

}  // namespace pf::comm
