#include "runtime/tensor_parallel/group.h"

#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/comm/world.h"
#include "runtime/core/error.h"

namespace pf {

TensorSplit parse_tensor_split(const std::string& text, const std::string& path) {
  if (text == "column") return TensorSplit::kColumn;
  if (text == "row") return TensorSplit::kRow;
  if (text == "vocab") return TensorSplit::kVocab;
  fail(ErrorCode::kInvalidArgument, path, ": unknown tensor-parallel split '", text, "' (known: column, row, vocab)");
}

const char* tensor_split_name(TensorSplit split) {
  switch (split) {
    case TensorSplit::kColumn: return "column";
    case TensorSplit::kRow: return "row";
    case TensorSplit::kVocab: return "vocab";
    case TensorSplit::kNone: break;
  }
  return "none";
}

TensorReduction parse_tensor_reduction(const std::string& text) {
  if (text == "allreduce") return TensorReduction::kAllReduce;
  if (text == "deterministic") return TensorReduction::kDeterministic;
  fail(ErrorCode::kInvalidArgument, "tensor_reduction: unknown reduction '", text,
       "' (known: allreduce, deterministic)");
}

TensorParallelGroup::TensorParallelGroup(std::shared_ptr<comm::World> world, TensorReduction reduction,
                                         double timeout_seconds, bool sequence_parallel, bool overlap)
    : world_(std::move(world)), reduction_(reduction), timeout_seconds_(timeout_seconds),
      sequence_parallel_(sequence_parallel), overlap_(overlap) {
  PF_CHECK_ARG(world_ != nullptr, "tensor parallel group: the world is null");
  PF_CHECK_ARG(timeout_seconds_ > 0, "tensor parallel group: the timeout must be > 0 seconds, got ",
               timeout_seconds_);
  rank_ = world_->rank();
  size_ = world_->size();
}

TensorParallelGroup::~TensorParallelGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (worker_.joinable()) worker_.join();  // after the started collective, if one runs
}

template <typename Collective>
auto TensorParallelGroup::naming_errors(const std::string& what, Collective&& collective) -> decltype(collective()) {
  try {
    return collective();
  } catch (const Error& e) {
    throw Error(e.code(), "tensor parallel rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ", " +
                              what + ": " + e.what());
  }
}

void TensorParallelGroup::all_reduce_sum(float* data, int64_t count, const std::string& what) {
  wait_all_reduce();  // collectives keep the order they were started in (the same below)
  reduce_sum(data, count, what);
}

void TensorParallelGroup::reduce_sum(float* data, int64_t count, const std::string& what) {
  PF_CHECK_ARG(count >= 0 && (data != nullptr || count == 0), "tensor parallel ", what, ": bad buffer");
  reduced_bytes_ += count * static_cast<int64_t>(sizeof(float));
  if (size_ == 1 || count == 0) return;
  if (reduction_ == TensorReduction::kAllReduce) {
    naming_errors(what, [&] { world_->all_reduce_sum(data, static_cast<size_t>(count), timeout_seconds_); });
    return;
  }
  const size_t bytes = static_cast<size_t>(count) * sizeof(float);
  // (Counted as reduced bytes, not gathered.)
  const std::vector<char> all = naming_errors(what, [&] { return world_->all_gather(data, bytes, timeout_seconds_); });
  std::memcpy(data, all.data(), bytes);
  for (int r = 1; r < size_; ++r) {
    const float* part = reinterpret_cast<const float*>(all.data() + static_cast<size_t>(r) * bytes);
    for (int64_t i = 0; i < count; ++i) data[i] += part[i];
  }
}

namespace {

bool on_host(const Tensor& t) { return t.device().kind == DeviceKind::kCpu; }

void check_f32(const Tensor& t, const std::string& what) {
  PF_CHECK_ARG(t.defined() && t.dtype() == DType::kF32, "tensor parallel ", what, ": expected an f32 tensor, got ",
               t.defined() ? dtype_name(t.dtype()) : "undefined");
}

}  // namespace

void TensorParallelGroup::all_reduce_sum(const Tensor& t, const std::string& what) {
  check_f32(t, what);
  if (on_host(t)) {
    all_reduce_sum(t.f32(), t.numel(), what);
    return;
  }
  const Tensor host = t.to_device(Device::cpu());
  all_reduce_sum(host.f32(), host.numel(), what);
  t.copy_from(host);
}

void TensorParallelGroup::start_all_reduce_sum(const Tensor& t, const std::string& what) {
  check_f32(t, what);
  if (!overlap_) return all_reduce_sum(t, what);
  if (on_host(t)) {
    start_all_reduce_sum(t.f32(), t.numel(), what);
    return;
  }
  wait_all_reduce();
  Tensor host = t.to_device(Device::cpu());
  start_all_reduce_sum(host.f32(), host.numel(), what);
  pending_device_ = t;
  pending_host_ = std::move(host);
}

void TensorParallelGroup::start_all_reduce_sum(float* data, int64_t count, const std::string& what) {
  if (!overlap_) return all_reduce_sum(data, count, what);
  wait_all_reduce();
  overlapped_bytes_ += count * static_cast<int64_t>(sizeof(float));
  start_pending([this, data, count, what] { reduce_sum(data, count, what); });
}

void TensorParallelGroup::start_pending(std::function<void()> collective) {
  if (!worker_.joinable()) worker_ = std::thread([this] { run_worker(); });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_ = std::move(collective);
    busy_ = true;
  }
  changed_.notify_all();
}

void TensorParallelGroup::run_worker() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || pending_; });
    if (!pending_) return;  // stopping, nothing started
    std::function<void()> collective = std::exchange(pending_, nullptr);
    lock.unlock();
    std::exception_ptr error;
    try {
      collective();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    pending_error_ = error;
    busy_ = false;
    changed_.notify_all();
  }
}

void TensorParallelGroup::wait_all_reduce() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!busy_) return;
    changed_.wait(lock, [this] { return !busy_; });
  }
  const Tensor device = std::exchange(pending_device_, Tensor()), host = std::exchange(pending_host_, Tensor());
  if (pending_error_) std::rethrow_exception(std::exchange(pending_error_, nullptr));
  if (device.defined()) device.copy_from(host);
}

std::vector<char> TensorParallelGroup::all_gather(const void* data, size_t bytes, const std::string& what) {
  wait_all_reduce();
  gathered_bytes_ += static_cast<int64_t>(bytes);
  return naming_errors(what, [&] { return world_->all_gather(data, bytes, timeout_seconds_); });
}

std::vector<float> TensorParallelGroup::all_gather_floats(const std::vector<float>& mine, const std::string& what) {
  if (size_ == 1) return mine;
  const std::vector<char> all = all_gather(mine.data(), mine.size() * sizeof(float), what);
  std::vector<float> out(mine.size() * static_cast<size_t>(size_));
  if (!out.empty()) std::memcpy(out.data(), all.data(), out.size() * sizeof(float));
  return out;
}

std::vector<double> TensorParallelGroup::sum_in_rank_order(const std::vector<double>& mine, const std::string& what) {
  wait_all_reduce();
  if (size_ == 1 || mine.empty()) return mine;
  gathered_bytes_ += static_cast<int64_t>(mine.size() * sizeof(double));
  const std::vector<double> all =
      naming_errors(what, [&] { return comm::all_gather_doubles(*world_, mine, timeout_seconds_); });
  std::vector<double> sums(mine.size(), 0.0);
  for (int r = 0; r < size_; ++r)
    for (size_t i = 0; i < mine.size(); ++i) sums[i] += all[static_cast<size_t>(r) * mine.size() + i];
  return sums;
}

namespace {

// [B, S, ...] as (batch, steps, floats per step); kInvalidArgument naming `what` unless an f32
// tensor of rank >= 2 whose steps `parts` divides.
struct SequenceDims {
  int64_t batch = 0, steps = 0, inner = 1;
};
SequenceDims sequence_dims(const Tensor& t, int parts, const std::string& what) {
  PF_CHECK_ARG(t.defined() && t.dtype() == DType::kF32 && t.rank() >= 2,
               "sequence parallelism, ", what, ": expected an f32 tensor [B, S, ...], got ",
               t.defined() ? shape_to_string(t.shape()) : "undefined");
  SequenceDims d;
  d.batch = t.dim(0);
  d.steps = t.dim(1);
  for (int i = 2; i < t.rank(); ++i) d.inner *= t.dim(i);
  PF_CHECK_ARG(d.steps % parts == 0, "sequence parallelism, ", what, ": ", d.steps,
               " steps per sequence are not divisible by the tensor-parallel size ", parts);
  return d;
}

Shape with_steps(Shape shape, int64_t steps) {
  shape[1] = steps;
  return shape;
}

// Member `member`'s steps of every sequence of `whole` (dims `d`, `held` steps per member) into
// `out`, contiguous: [B, held, ...].
void copy_member_steps(const float* whole, const SequenceDims& d, int64_t held, int member, float* out) {
  const size_t block = static_cast<size_t>(held * d.inner);
  for (int64_t b = 0; b < d.batch; ++b)
    std::memcpy(out + static_cast<size_t>(b) * block, whole + static_cast<size_t>(b * d.steps + member * held) * d.inner,
                block * sizeof(float));
}

// `on_cpu(t)` for a CPU (or undefined) tensor; for a CUDA tensor, on_cpu of its host copy, the
// result copied back to its device.
template <typename OnCpu>
Tensor through_host(const Tensor& t, OnCpu&& on_cpu) {
  if (!t.defined() || on_host(t)) return on_cpu(t);
  return on_cpu(t.to_device(Device::cpu())).to_device(t.device());
}

}  // namespace

Tensor TensorParallelGroup::gather_sequence(const Tensor& shard, const std::string& what) {
  return through_host(shard, [&](const Tensor& s) { return gather_sequence_on_host(s, what); });
}

Tensor TensorParallelGroup::reduce_scatter_sequence(Tensor& partial, const std::string& what) {
  return through_host(partial, [&](Tensor p) { return reduce_scatter_sequence_on_host(p, what); });
}

Tensor TensorParallelGroup::sum_partials(Tensor& partial, const std::string& what) {
  if (sequence_parallel()) return reduce_scatter_sequence(partial, what);
  all_reduce_sum(partial, what);
  return partial;
}

Tensor TensorParallelGroup::sequence_shard(const Tensor& whole, const std::string& what) const {
  return through_host(whole, [&](const Tensor& w) { return sequence_shard_on_host(w, what); });
}

Tensor TensorParallelGroup::gather_sequence_on_host(const Tensor& shard, const std::string& what) {
  const SequenceDims d = sequence_dims(shard, 1, what);
  const size_t block = static_cast<size_t>(d.steps * d.inner), bytes = static_cast<size_t>(shard.numel()) * sizeof(float);
  const std::vector<char> all = all_gather(shard.f32(), bytes, what);
  Tensor whole = Tensor::empty(with_steps(shard.shape(), d.steps * size_));
  const float* from = reinterpret_cast<const float*>(all.data());
  float* to = whole.f32();
  for (int r = 0; r < size_; ++r)
    for (int64_t b = 0; b < d.batch; ++b)
      std::memcpy(to + (static_cast<size_t>(b) * size_ + r) * block,
                  from + static_cast<size_t>(r) * bytes / sizeof(float) + static_cast<size_t>(b) * block,
                  block * sizeof(float));
  return whole;
}

Shape TensorParallelGroup::scattered_shape(const Tensor& partial, const std::string& what) const {
  const SequenceDims d = sequence_dims(partial, size_, what);
  return with_steps(partial.shape(), d.steps / size_);
}

Tensor TensorParallelGroup::reduce_scatter_sequence_on_host(Tensor& partial, const std::string& what) {
  wait_all_reduce();
  Tensor mine = Tensor::empty(scattered_shape(partial, what));
  reduce_scatter_into(partial, mine, what);
  return mine;
}

Tensor TensorParallelGroup::start_reduce_scatter_sequence(const Tensor& partial, const std::string& what) {
  if (!overlap_) {
    Tensor scratch = partial;
    return reduce_scatter_sequence(scratch, what);
  }
  wait_all_reduce();
  const Shape shape = scattered_shape(partial, what);
  overlapped_bytes_ += partial.numel() * static_cast<int64_t>(sizeof(float));
  const bool device = !on_host(partial);
  const Tensor host_partial = device ? partial.to_device(Device::cpu()) : partial;
  const Tensor host_mine = Tensor::empty(shape);
  const Tensor mine = device ? Tensor::empty(shape, DType::kF32, partial.device()) : host_mine;
  start_pending([this, host_partial, host_mine, what] { reduce_scatter_into(host_partial, host_mine, what); });
  if (device) {
    pending_device_ = mine;
    pending_host_ = host_mine;
  }
  return mine;
}

void TensorParallelGroup::reduce_scatter_into(const Tensor& partial, const Tensor& mine, const std::string& what) {
  const SequenceDims d = sequence_dims(partial, size_, what);
  const int64_t held = d.steps / size_;
  if (reduction_ == TensorReduction::kDeterministic) {  // every member's partials, added in rank order
    reduce_sum(partial.f32(), partial.numel(), what);
    copy_member_steps(partial.f32(), d, held, rank_, mine.f32());
    return;
  }
  scattered_bytes_ += partial.numel() * static_cast<int64_t>(sizeof(float));
  // Member r's block: its steps of every sequence, [B, S/T, ...] contiguous, as the World scatters blocks.
  const size_t per_member = static_cast<size_t>(d.batch * held * d.inner);
  std::vector<float> blocks(per_member * static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) copy_member_steps(partial.f32(), d, held, r, blocks.data() + static_cast<size_t>(r) * per_member);
  naming_errors(what, [&] { world_->reduce_scatter_sum(blocks.data(), per_member, mine.f32(), timeout_seconds_); });
}

Tensor TensorParallelGroup::sequence_shard_on_host(const Tensor& whole, const std::string& what) const {
  const SequenceDims d = sequence_dims(whole, size_, what);
  const int64_t held = d.steps / size_;
  Tensor shard = Tensor::empty(with_steps(whole.shape(), held));
  copy_member_steps(whole.f32(), d, held, rank_, shard.f32());
  return shard;
}

}  // namespace pf
