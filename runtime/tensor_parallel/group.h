// The members of one tensor-parallel group (docs/EXECUTION.md, "Tensor parallelism"): T processes
// (or threads) that each hold 1/T of every split layer and run the same step on the same data. The
// split layers (Linear with "parallel": "column" or "row") reduce their partial results through it.
//
// Two reductions (TrainingConfig::tensor_reduction):
// - kAllReduce: the World's all-reduce (MPI_Allreduce across processes). The same bits on every
//   member and from run to run at a fixed T, within float rounding of the unsplit computation.
// - kDeterministic: every member's partial values gathered and added in rank order,
//   ((p0 + p1) + p2) + ..., on every member: bitwise equal to a single process that computes the
//   same partial products and adds them in that order (tests/tensor_parallel checks it).
//
// The tensor-level collectives take CPU or CUDA tensors. A CUDA tensor's collective is staged
// through the host: copied to host memory on the calling thread's current stream (which waits for
// the kernels that wrote it), reduced or gathered there exactly as a CPU tensor is, and copied back
// (docs/EXECUTION.md, "Tensor parallelism on CUDA devices"). The arithmetic, and so the
// deterministic mode's order, is the CPU's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace pf {
namespace comm {
class World;
}  // namespace comm

// How a layer is split across a tensor-parallel group (the layer JSON's "parallel"). kColumn: a
// linear's output features, each member computing its slice of the output (the input gradient is
// then summed over the group); kRow: its input features, the members' partial outputs summed
// before the bias is added. A column split's output passes through element-wise layers to the
// row split that consumes it (split_model_for_tensor_parallel checks the chain). kVocab: Megatron's
// vocabulary-parallel pair: an embedding's token rows (each member looks up the ids in its range,
// the outputs summed over the group), and the head linear whose logits the loss takes as they are,
// each member holding 1/T of the classes (a column split that ends at a vocabulary-parallel
// cross-entropy: the full logits are never gathered).
enum class TensorSplit { kNone, kColumn, kRow, kVocab };
// "column", "row" or "vocab"; kInvalidArgument naming `path` otherwise.
TensorSplit parse_tensor_split(const std::string& text, const std::string& path);
const char* tensor_split_name(TensorSplit split);  // "none", "column", "row", "vocab"

enum class TensorReduction { kAllReduce, kDeterministic };
// "allreduce" or "deterministic"; kInvalidArgument naming the option otherwise.
TensorReduction parse_tensor_reduction(const std::string& text);

class TensorParallelGroup {
 public:
  // `world`: the T members, this one among them. `timeout_seconds`: the longest a reduction waits
  // for a peer (pf::Error kTimeout after it; kCancelled naming the failed member once one aborted).
  // `sequence_parallel`: Megatron's sequence parallelism (TrainingConfig::sequence_parallel; docs/EXECUTION.md,
  // "Sequence parallelism"): between the split layers, activations are split by sequence steps, member r
  // holding steps [r S/T, (r+1) S/T) of every sequence ([B, S/T, ...]); a column split all-gathers its
  // input (gather_sequence) and sums its input gradient into the members' steps
  // (reduce_scatter_sequence), a row split sums its output into them and all-gathers its output
  // gradient, and the norms' weight gradients are summed over the group.
  // `overlap` (TrainingConfig::tensor_parallel_overlap): false makes start_all_reduce_sum and
  // start_reduce_scatter_sequence run their collective at once, as the blocking ones do.
  TensorParallelGroup(std::shared_ptr<comm::World> world, TensorReduction reduction, double timeout_seconds,
                      bool sequence_parallel = false, bool overlap = true);

  ~TensorParallelGroup();
  TensorParallelGroup(const TensorParallelGroup&) = delete;
  TensorParallelGroup& operator=(const TensorParallelGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  TensorReduction reduction() const { return reduction_; }
  bool sequence_parallel() const { return sequence_parallel_ && size_ > 1; }

  // Element-wise sum of every member's `count` floats, into `data` on every member. `what` names
  // the reduction in errors ("linear 'fc1' forward").
  void all_reduce_sum(float* data, int64_t count, const std::string& what);
  // The same over an f32 tensor on the CPU or a CUDA device, in place.
  void all_reduce_sum(const Tensor& t, const std::string& what);
  // Megatron's overlap of B's all-reduce with W: all_reduce_sum of `data` started on the group's
  // worker thread; the caller computes meanwhile (weight gradients) and calls wait_all_reduce() before it
  // reads `data`. One at a time; every other collective of the group first waits for it, so the
  // members' collectives keep one order. Its bytes count in reduced_bytes() and overlapped_bytes().
  void start_all_reduce_sum(float* data, int64_t count, const std::string& what);
  // The same over an f32 tensor on the CPU or a CUDA device. A CUDA tensor is copied to the host
  // now and the sum copied back into it by wait_all_reduce (on the waiting thread's stream).
  void start_all_reduce_sum(const Tensor& t, const std::string& what);
  // Waits for the started all-reduce (none: returns at once); its error, if it failed, is thrown here.
  void wait_all_reduce();

  // Element-wise sums over the members of `mine` (the same length on every member), each added in
  // rank order in both modes, the same on every member: the split parameters' squared norms.
  std::vector<double> sum_in_rank_order(const std::vector<double>& mine, const std::string& what);

  // Every member's `mine` (the same length on every member), member r's at r * mine.size(): the
  // vocabulary-parallel loss's row maxima and best classes.
  std::vector<float> all_gather_floats(const std::vector<float>& mine, const std::string& what);

  // Sequence parallelism (f32 tensors on the CPU or a CUDA device; results on the argument's device).
  // The members' [B, S/T, ...] shards as one [B, S, ...] tensor,
  // member r's at steps [r S/T, (r+1) S/T): exact (a copy), the same on every member.
  Tensor gather_sequence(const Tensor& shard, const std::string& what);
  // The members' [B, S, ...] partial tensors summed, this member's steps of the sum
  // ([B, S/T, ...]): the World's reduce-scatter (MPI_Ireduce_scatter_block: each member's link
  // carries (T - 1)/T of the partial tensor, half an all-reduce), or in the deterministic mode
  // every member's partials gathered and added in rank order, so that it equals this member's
  // steps of all_reduce_sum's result. `partial` may be used as scratch. kInvalidArgument naming
  // `what` when T does not divide S.
  Tensor reduce_scatter_sequence(Tensor& partial, const std::string& what);
  // The members' partial tensors summed (f32, CPU or CUDA): all-reduced in `partial`, which is
  // returned, or under sequence parallelism reduce-scattered to this member's steps [B, S/T, ...]
  // (then `partial` is scratch). What a row split and a vocabulary-parallel embedding do with their
  // partial outputs.
  Tensor sum_partials(Tensor& partial, const std::string& what);
  // reduce_scatter_sequence started on the group's thread, as start_all_reduce_sum is (Megatron's
  // overlap of B's reduce-scatter with W under sequence parallelism): returns this member's
  // [B, S/T, ...] tensor, whose values are there once wait_all_reduce() has returned. `partial` is
  // scratch until then. Its bytes count in overlapped_bytes() too.
  Tensor start_reduce_scatter_sequence(const Tensor& partial, const std::string& what);
  // This member's steps [r S/T, (r+1) S/T) of `whole` [B, S, ...], copied; no communication.
  Tensor sequence_shard(const Tensor& whole, const std::string& what) const;

  // Payload bytes this member has put into all-reduces since it was made (count x 4 per call): a
  // ring all-reduce moves 2 (T - 1) / T of them over each member's link.
  int64_t reduced_bytes() const { return reduced_bytes_; }
  // Payload bytes this member has contributed to all-gathers since it was made (its own part of
  // each: all_gather, all_gather_floats, sum_in_rank_order, the pipeline's slice messages).
  int64_t gathered_bytes() const { return gathered_bytes_; }
  // Payload bytes of the partial tensors this member has put into reduce-scatters (the whole
  // [B, S, ...] of each call; the deterministic mode's are all-reduces, counted in reduced_bytes).
  int64_t scattered_bytes() const { return scattered_bytes_; }
  // Payload bytes of the collectives started by start_all_reduce_sum and start_reduce_scatter_sequence
  // (overlapped with W).
  int64_t overlapped_bytes() const { return overlapped_bytes_; }

  // Every member's `bytes` bytes, member r's at r * bytes, the same on every member (checkpoints
  // gather the slices with it).
  std::vector<char> all_gather(const void* data, size_t bytes, const std::string& what);

 private:
  // all_reduce_sum without waiting for a started one (the worker runs the started one).
  void reduce_sum(float* data, int64_t count, const std::string& what);
  // The CPU versions of the sequence collectives.
  Tensor gather_sequence_on_host(const Tensor& shard, const std::string& what);
  Tensor reduce_scatter_sequence_on_host(Tensor& partial, const std::string& what);
  // The reduce-scatter of host `partial` into host `mine` (its [B, S/T, ...]), without waiting for
  // a started collective (the worker runs the started one).
  void reduce_scatter_into(const Tensor& partial, const Tensor& mine, const std::string& what);
  // [B, S/T, ...] of a [B, S, ...] partial; kInvalidArgument naming `what` unless T divides S.
  Shape scattered_shape(const Tensor& partial, const std::string& what) const;
  // Runs `collective` on the group's worker thread (started the first time); its error is kept
  // for wait_all_reduce. One at a time: the caller has waited for the previous one.
  void start_pending(std::function<void()> collective);
  void run_worker();
  Tensor sequence_shard_on_host(const Tensor& whole, const std::string& what) const;
  // Runs `collective` (a call on world_); an error it throws comes back naming this member and `what`.
  template <typename Collective>
  auto naming_errors(const std::string& what, Collective&& collective) -> decltype(collective());

  std::shared_ptr<comm::World> world_;
  TensorReduction reduction_;
  double timeout_seconds_;
  bool sequence_parallel_ = false;
  bool overlap_ = true;
  int rank_ = 0, size_ = 1;
  int64_t reduced_bytes_ = 0;
  int64_t gathered_bytes_ = 0;
  int64_t scattered_bytes_ = 0;
  int64_t overlapped_bytes_ = 0;
  // The worker that runs the started collective, and what it shares with the starting thread.
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> pending_;     // started, not yet taken by the worker
  bool busy_ = false;                 // a started collective has not finished
  bool stopping_ = false;
  std::exception_ptr pending_error_;  // its error, thrown by wait_all_reduce
  // A started all-reduce of a CUDA tensor: the tensor, and the host copy the thread reduces.
  Tensor pending_device_, pending_host_;
};

}  // namespace pf
