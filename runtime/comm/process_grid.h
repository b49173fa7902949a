// One launch of T x D x P processes (docs/EXECUTION.md, "The process grid"): D pipeline replicas
// of P ranks each, every rank a tensor-parallel group of T processes. Layout (Megatron's, TP
// fastest): launch rank w = tp + T (dp + D pp), so a tensor-parallel group's members are
// consecutive (mpirun places consecutive ranks on one machine first: the busiest links stay on
// it) and the pipeline ranks are outermost.
#pragma once

#include <memory>

#include "runtime/comm/world.h"

namespace pf::comm {

struct ProcessGrid {
  int tensor_ranks = 1;                   // T
  int replicas = 1;                       // D
  int pipeline_ranks = 1;                 // P
  int tensor_rank = 0;                    // this process's member of its tensor-parallel group
  int replica = 0;                        // its replica
  int pipeline_rank = 0;                  // and its rank in that replica's pipeline
  std::shared_ptr<World> pipeline;        // the P processes with this (tp, dp)
  std::shared_ptr<World> data_parallel;   // the D processes with this (tp, pp)
  std::shared_ptr<World> tensor_parallel; // the T processes with this (dp, pp)
};

class MpiWorld;

// Collective over `launch`: kInvalidArgument unless its size is tensor_ranks * replicas *
// pipeline_ranks. Every process makes the groups in one global order (pipeline, data parallel,
// tensor parallel). Part of the MPI backend (runtime/backend/mpi): the runtime reaches it through
// mpi_backend().process_grid.
ProcessGrid make_process_grid(MpiWorld& launch, int tensor_ranks, int replicas, int pipeline_ranks);

}  // namespace pf::comm
