#include "runtime/comm/thread_world.h"

#include <chrono>
#include <cstring>
#include <sstream>

#include "runtime/comm/poll.h"
#include "runtime/core/error.h"

namespace pf::comm {

class ThreadWorld::Member : public World {
 public:
  Member(ThreadWorld* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }
  std::string describe() const override {
    return "thread rank " + std::to_string(rank_) + " of " + std::to_string(group_->size_);
  }
  Transport& endpoint() override { return group_->transport_.endpoint(rank_); }
  void barrier(double timeout_seconds) override {
    group_->rendezvous(rank_, CollectiveOp::kBarrier, nullptr, 0, 0, timeout_seconds);
  }
  std::vector<char> all_gather(const void* data, size_t bytes, double timeout_seconds) override {
    PF_CHECK_ARG(data != nullptr || bytes == 0, "rank ", rank_, ": all_gather: data is null");
    return group_->rendezvous(rank_, CollectiveOp::kAllGather, data, bytes, 0, timeout_seconds);
  }
  void broadcast(void* data, size_t bytes, int root, double timeout_seconds) override {
    PF_CHECK_ARG(root >= 0 && root < group_->size_, "rank ", rank_, ": broadcast: no root rank ", root, " (",
                 group_->size_, " members)");
    PF_CHECK_ARG(data != nullptr || bytes == 0, "rank ", rank_, ": broadcast: data is null");
    copy_out(group_->rendezvous(rank_, CollectiveOp::kBroadcast, data, bytes, root, timeout_seconds), data);
  }
  void all_reduce_sum(float* data, size_t count, double timeout_seconds) override {
    PF_CHECK_ARG(data != nullptr || count == 0, "rank ", rank_, ": all_reduce_sum: data is null");
    copy_out(group_->rendezvous(rank_, CollectiveOp::kAllReduceF32, data, count, 0, timeout_seconds), data);
  }
  void all_reduce_sum(double* data, size_t count, double timeout_seconds) override {
    PF_CHECK_ARG(data != nullptr || count == 0, "rank ", rank_, ": all_reduce_sum: data is null");
    copy_out(group_->rendezvous(rank_, CollectiveOp::kAllReduceF64, data, count, 0, timeout_seconds), data);
  }
  void abort(const std::string& reason) override { group_->abort(rank_, reason); }
  bool aborted() const override { return group_->aborted(); }
  std::string abort_cause() const override { return group_->abort_cause(); }

 private:
  static void copy_out(const std::vector<char>& result, void* data) {
    if (!result.empty()) std::memcpy(data, result.data(), result.size());
  }
  ThreadWorld* group_;
  int rank_;
};

ThreadWorld::ThreadWorld(int size, InProcessTransport::Options options)
    : size_(size), transport_(size, options), slots_(size > 0 ? size : 0) {
  for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<Member>(this, r));
}

ThreadWorld::~ThreadWorld() = default;

World& ThreadWorld::member(int rank) {
  PF_CHECK_ARG(rank >= 0 && rank < size_, "thread world: no rank ", rank, " (", size_, " members)");
  return *members_[rank];
}

bool ThreadWorld::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

std::string ThreadWorld::abort_cause() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_ ? abort_reason_ : std::string();
}

void ThreadWorld::throw_cancelled_locked(int rank, CollectiveOp op) {
  fail(ErrorCode::kCancelled, "rank ", rank, ": ", collective_op_name(op), " cancelled: ", abort_reason_);
}

namespace {

size_t element_size(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllReduceF32: return sizeof(float);
    case CollectiveOp::kAllReduceF64: return sizeof(double);
    default: return 1;
  }
}

template <typename T>
void sum_in_rank_order(const std::vector<const void*>& inputs, size_t count, std::vector<char>* out) {
  out->resize(count * sizeof(T));
  T* acc = reinterpret_cast<T*>(out->data());
  std::memcpy(acc, inputs[0], count * sizeof(T));
  for (size_t r = 1; r < inputs.size(); ++r) {
    const T* x = static_cast<const T*>(inputs[r]);
    for (size_t i = 0; i < count; ++i) acc[i] += x[i];
  }
}

}  // namespace

void ThreadWorld::combine_locked() {
  std::vector<CollectiveSignature> signatures;
  std::vector<const void*> inputs;
  for (const Slot& s : slots_) {
    signatures.push_back(s.signature);
    inputs.push_back(s.data);
  }
  result_.clear();
  result_error_ = signature_mismatch(signatures);
  if (!result_error_.empty()) return;
  const CollectiveSignature& sig = slots_[0].signature;
  const auto op = static_cast<CollectiveOp>(sig.op);
  const size_t n = static_cast<size_t>(sig.size);
  switch (op) {
    case CollectiveOp::kAllGather:
      result_.resize(n * size_);
      for (int r = 0; r < size_; ++r) {
        if (n > 0) std::memcpy(result_.data() + r * n, inputs[r], n);
      }
      break;
    case CollectiveOp::kBroadcast:
      result_.resize(n);
      if (n > 0) std::memcpy(result_.data(), inputs[sig.root], n);
      break;
    case CollectiveOp::kAllReduceF32:
      if (n > 0) sum_in_rank_order<float>(inputs, n, &result_);
      break;
    case CollectiveOp::kAllReduceF64:
      if (n > 0) sum_in_rank_order<double>(inputs, n, &result_);
      break;
    default:
      break;
  }
}

std::vector<char> ThreadWorld::rendezvous(int rank, CollectiveOp op, const void* data, size_t size, int root,
                                          double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  PF_CHECK_ARG(size <= static_cast<size_t>(INT64_MAX) / element_size(op), "rank ", rank, ": ",
               collective_op_name(op), ": size ", size, " is too large");
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw_cancelled_locked(rank, op);
  PF_CHECK_STATE(!slots_[rank].arrived, "rank ", rank, ": ", collective_op_name(op),
                 ": this member is already inside a collective (one thread per member)");
  const uint64_t generation = generation_;
  slots_[rank] =
      Slot{true, true, CollectiveSignature{static_cast<int64_t>(op), static_cast<int64_t>(size), root}, data};
  ++arrived_;
  ++inside_;
  struct Leave {
    int* inside;
    ~Leave() { --*inside; }
  } leave{&inside_};  // runs with the lock held: declared after `lock`
  if (arrived_ == size_) {
    combine_locked();
    for (Slot& s : slots_) s = Slot();
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
  } else {
    changed_.wait_until(lock, deadline.end(), [&] { return generation_ != generation || aborted_; });
    if (generation_ == generation) {
      std::ostringstream missing;
      int n_missing = 0;
      for (int r = 0; r < size_; ++r) {
        if (!slots_[r].came) missing << (n_missing++ ? ", " : "") << r;
      }
      slots_[rank].arrived = false;  // withdraw: the others must not read `data` once this call returns
      slots_[rank].data = nullptr;
      if (--arrived_ == 0) {
        for (Slot& s : slots_) s.came = false;
      }
      if (aborted_) throw_cancelled_locked(rank, op);
      fail(ErrorCode::kTimeout, "rank ", rank, ": ", collective_op_name(op), " timed out after ", timeout_seconds,
           " s: ", n_missing == 1 ? "rank " : "ranks ", missing.str(), n_missing == 1 ? " has" : " have",
           " not arrived (", size_, " members)");
    }
  }
  if (!result_error_.empty()) fail(ErrorCode::kInvalidArgument, "rank ", rank, ": ", result_error_);
  return result_;
}

void ThreadWorld::abort(int rank, const std::string& reason) {
  std::string full;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = "rank " + std::to_string(rank) + " failed: " + reason;
    full = abort_reason_;
    changed_.notify_all();
  }
  transport_.cancel(full);
}

void ThreadWorld::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  PF_CHECK_STATE(inside_ == 0, "thread world: reset() while ", inside_, " member(s) are inside a collective");
  transport_.reset();
  aborted_ = false;
  abort_reason_.clear();
  for (Slot& s : slots_) s = Slot();
  arrived_ = 0;
  result_.clear();
  result_error_.clear();
}

}  // namespace pf::comm
