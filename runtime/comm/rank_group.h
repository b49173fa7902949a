// The ranks of one pipeline as a trainer's step sees them, whatever carries their messages: each
// rank's endpoint, stopping every rank when one fails, whether and why they were stopped, and
// making the group usable again between steps. Four kinds, each in its own file: threads of this
// process (thread_rank_group.h), one process per rank (process_rank_group.h), CUDA devices of this
// process (gpu_rank_group.h), one process per rank on CUDA devices (gpu_process_rank_group.h).
// Callers never branch on the kind.
#pragma once

#include <string>

#include "runtime/comm/transport.h"

namespace pf::comm {

class GpuTransportGroup;

class RankGroup {
 public:
  virtual ~RankGroup() = default;
  // Rank `rank`'s endpoint (a rank this process runs).
  virtual Transport& endpoint(int rank) = 0;
  // Rank `rank` failed with `what`: stops the other ranks (each kind decides whom it tells, and
  // whether a rank stopped by another's failure tells anyone again).
  virtual void rank_failed(int rank, const std::string& what) = 0;
  virtual bool cancelled() const = 0;
  // Why the group was stopped ("rank 1 failed: ..."), or "" while it was not.
  virtual std::string cause() const = 0;
  // Between steps: makes a stopped group usable again where the kind can (threads, devices);
  // processes stay stopped (a failed step leaves the world aborted).
  virtual void reset() = 0;
  // The GPU kind's transport (which pairs use NCCL, pending messages), for inspection; null for the others.
  virtual const GpuTransportGroup* gpu_transport() const { return nullptr; }
};

}  // namespace pf::comm
