// Data parallelism: reduces a stage's gradients over the D replicas of that stage (the processes of
// one data-parallel group) on a thread of its own, so that the reduction that an ALLREDUCE action
// starts overlaps whatever the rank does next (docs/EXECUTION.md, "Data parallel").
//
// CUDA gradients (one GPU per process) are reduced through host copies: submit() records an event
// on the calling worker's current stream, the reducer thread waits for it, copies the gradients to
// the host, reduces them over the group as above and copies the sums back (docs/CUDA.md, "GPU ranks
// in separate processes": the same arithmetic and the same MPI collectives as CPU processes).
//
// Modes:
// * kAllReduce: the stage's gradients packed into one buffer and summed with World::all_reduce_sum
//   (MPI_Allreduce): the library's reduction order, within float rounding of the deterministic sum.
// * kDeterministic: the packed gradients are gathered from every replica and added in replica
//   order (add_replica_gradient), the same bits on every replica and bitwise the arithmetic of
//   SequentialTrainer with TrainerOptions::replicas = D.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/world.h"
#include "runtime/layers/parameter.h"

namespace pf::exec {

enum class GradientReduction { kAllReduce, kDeterministic };
// "allreduce" or "deterministic"; kInvalidArgument naming the value otherwise.
GradientReduction parse_gradient_reduction(const std::string& name);

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<comm::World> group, GradientReduction mode, double timeout_seconds);
  ~GradientReducer();  // waits for the thread (a reduction in flight ends by its timeout)
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Queues the reduction of `params`' gradients (every replica queues the same stages in the same
  // order). After a failure later requests are dropped until wait() reports it. Called on the
  // rank's worker thread (CUDA gradients: its current stream has the gradients' last work).
  void submit(int stage, std::vector<Parameter*> params);
  // Blocks until everything submitted is reduced; rethrows the first failure (then clears it).
  void wait();
  void set_timeout_seconds(double seconds);
  double busy_seconds() const;  // time spent reducing since the last wait()

 private:
  struct Request {
    int stage;
    std::vector<Parameter*> params;
    std::shared_ptr<DeviceEvent> ready;  // CUDA gradients: their last work (null on the CPU)
  };
  void run();
  void reduce(const Request& request);

  std::shared_ptr<comm::World> group_;
  GradientReduction mode_;
  double timeout_seconds_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Request> queue_;
  int in_flight_ = 0;
  bool shutdown_ = false;
  std::exception_ptr error_;
  double busy_seconds_ = 0;
  std::thread thread_;
};

}  // namespace pf::exec
