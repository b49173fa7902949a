// Where each rank computes, behind one interface: the CPU (every call a no-op or a plain copy) or
// CUDA devices (cuda_rank_devices.cc: parameters moved to their rank's device, a compute stream per
// rank, micro-batches copied to the ranks that read them, host waits at the step boundaries; with
// one process per rank, this process's rank only).
// The trainer never branches on the kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/execution/model_stages.h"
#include "runtime/run/resolve.h"
#include "runtime/train/batch.h"

namespace pf::exec {

class RankDevices {
 public:
  virtual ~RankDevices() = default;
  virtual Device device(int rank) const = 0;
  // What a rank's worker runs under during a step (its device and compute stream); empty on the CPU.
  virtual std::vector<std::unique_ptr<BackendScope>> enter(int rank) = 0;
  // The step's gradients to zero (this process's parameters of both copies).
  virtual void zero_gradients(const std::vector<Parameter*>& first, const std::vector<Parameter*>& copies) = 0;
  // The micro-batches as the ranks read them (inputs where stage 0 runs, targets where the last
  // stage runs): `micro` itself on the CPU, else copies kept in `storage` until the step is done.
  virtual const std::vector<Batch>& to_devices(const std::vector<Batch>& micro, std::vector<Batch>* storage) = 0;
  // Host waits: for the main thread's device work, and for every rank's compute stream (`what`
  // names it in a timeout).
  virtual void sync(const std::string& what) = 0;
  virtual void sync_ranks() = 0;
  // The main thread runs stage work of rank `rank` (activation measurement): `t` moves to its
  // device, `scope` becomes that device's scope.
  virtual void move_to_rank(int rank, Tensor& t, std::unique_ptr<BackendScope>& scope) = 0;
};

// The CPU, or the plan's CUDA devices (parameters of `stages` moved there now). device(rank) and
// enter(rank) are for the ranks this process runs.
std::unique_ptr<RankDevices> make_rank_devices(const PipelinePlan& plan, Model& model, const ModelStages& stages);
// CUDA devices (cuda_rank_devices.cc).
std::unique_ptr<RankDevices> make_cuda_rank_devices(const PipelinePlan& plan, Model& model, const ModelStages& stages);

}  // namespace pf::exec
