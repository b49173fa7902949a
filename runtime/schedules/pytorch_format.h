// PyTorch's pipeline-schedule CSV (torch.distributed.pipelining, PipelineScheduleMulti._dump_csv /
// _load_csv, and the runtime's compute+comms dumps): one row per rank, one action per cell, a cell
// being `<stage><type>[<micro-batch>]` as _Action prints it, e.g. `0F0`, `1I3`, `2W1`, `0SEND_F1`,
// `1RECV_B0`, `0UNSHARD`, `0REDUCE_GRAD`, or `(0F2;1B1)OVERLAP_F_B`. Empty cells (None) are idle
// steps. See docs/SCHEDULES.md, "PyTorch CSV".
//
// Meanings: F -> F, I (input gradient) -> B, W -> W, B (full backward) -> BW, SEND_F/RECV_F/SEND_B/
// RECV_B -> the same, REDUCE_GRAD -> ALLREDUCE of that stage, OVERLAP_F_B -> its sub-actions in
// order, a forward then a B or BW being the compound action (Action::overlaps_next on the F).
// UNSHARD/RESHARD (FSDP parameter gather/free) are read and dropped: PipeForge has no FSDP,
// each stage keeps its whole parameters, so they have nothing to do; parse_pytorch_csv lists them.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched {

struct PytorchCsv {
  Schedule schedule;
  // Cells read but not kept, one line each: "line 2 (rank 1), cell 1 '1UNSHARD': <why>".
  std::vector<std::string> dropped;
};

// Ranks are the rows (empty rows at the end are ignored), stages and micro-batches one more than the
// largest seen, the placement inferred from which rank runs which stage; the name is "custom".
// Syntax and ranges only: run validate() for the semantics (a compute+comms dump with deferred
// receives validates under CommSemantics::kPosted). Errors (kInvalidArgument) name the line (rank
// row), the cell number (1-based) and its text.
PytorchCsv parse_pytorch_csv(const std::string& text);
// The same from a file (errors also name the path).
PytorchCsv read_pytorch_csv_file(const std::string& path);

// One row per rank in PyTorch's letters (B -> I, BW -> B), cells separated by ',', rows ending in
// '\n'. with_comms: also SEND/RECV and ALLREDUCE (as REDUCE_GRAD), a compute+comms dump; without:
// the compute-only form (those are left out). STEP is always left out (PyTorch steps the optimizer
// outside the schedule). An F with overlaps_next and its backward are one `(F;B)OVERLAP_F_B` cell,
// the receives between them before it and the sends after. Throws kInvalidArgument naming rank, index and action for a kind PyTorch's
// format cannot carry (OFFLOAD, RELOAD, RECOMPUTE, HOLD, RETURN, UPDATE, HEAD).
std::string schedule_to_pytorch_csv(const Schedule& schedule, bool with_comms);

}  // namespace pf::sched
