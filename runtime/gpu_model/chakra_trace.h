// Chakra execution traces (MLCommons Chakra; what ASTRA-sim replays) of a simulated step
// (docs/PREDICT.md, "Chakra traces"): one file `<prefix>.<rank>.et` per global rank
// tp + T (dp + D pp), each a length-delimited GlobalMetadata followed by length-delimited Nodes
// (runtime/gpu_model/chakra/et_def.proto). A rank's nodes follow its pipeline rank's actions in
// schedule order, each depending on the one before (ctrl_deps):
//   * F, B, BW, W and RECOMPUTE: a COMP_NODE with the action's compute time (duration_micros; a
//     RECOMPUTE costs its F);
//   * the tensor-parallel collectives of an F or a B/BW: a COMM_COLL_NODE (ALL_REDUCE, comm_size the
//     action's total bytes) after its COMP_NODE, when T > 1;
//   * a pipeline message: COMM_SEND_NODE after the producing action (comm_dst, comm_tag,
//     comm_size), COMM_RECV_NODE before the consuming one, which also lists it in data_deps
//     (comm_src, the same comm_tag);
//   * after the schedule: the data-parallel gradient all-reduce (COMM_COLL_NODE, D > 1) and the
//     optimizer step (COMP_NODE).
// Process groups are not written (ASTRA-sim assigns collectives to its topology's dimensions).
#pragma once

#include <string>
#include <vector>

#include "runtime/gpu_model/collectives.h"
#include "runtime/schedules/ir.h"

namespace pf::gpu {

struct TraceCosts {
  // Per schedule stage: compute seconds of one micro-batch's F, B and W (a BW costs B + W) and the
  // bytes of the tensor-parallel collectives of one F and one B (0: none).
  std::vector<double> forward_s, backward_input_s, backward_weight_s;
  std::vector<double> forward_collective_bytes, backward_collective_bytes;
  double message_bytes = 0;             // one pipeline message, per sending GPU
  std::vector<double> gradient_bytes;   // per pipeline rank: what its data-parallel all-reduce moves
  double optimizer_s = 0;
};

// Writes every rank's file under `dir` (created when missing; an existing file of the same name is
// replaced, nothing else touched) and returns how many. kInvalidArgument for a schedule with
// actions the trace does not express (offload, balance, asynchronous updates, local heads), or a
// bad prefix; kIoError when a file cannot be written.
int write_chakra_traces(const sched::Schedule& schedule, const Grid& grid, const TraceCosts& costs,
                        const std::string& dir, const std::string& prefix);

}  // namespace pf::gpu
