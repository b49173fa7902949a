#include "runtime/tensor_parallel/group.h"

#include <cstring>
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
                                         double timeout_seconds)
    : world_(std::move(world)), reduction_(reduction), timeout_seconds_(timeout_seconds) {
  PF_CHECK_ARG(world_ != nullptr, "tensor parallel group: the world is null");
  PF_CHECK_ARG(timeout_seconds_ > 0, "tensor parallel group: the timeout must be > 0 seconds, got ",
               timeout_seconds_);
  rank_ = world_->rank();
  size_ = world_->size();
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

std::vector<char> TensorParallelGroup::all_gather(const void* data, size_t bytes, const std::string& what) {
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
  if (size_ == 1 || mine.empty()) return mine;
  gathered_bytes_ += static_cast<int64_t>(mine.size() * sizeof(double));
  const std::vector<double> all =
      naming_errors(what, [&] { return comm::all_gather_doubles(*world_, mine, timeout_seconds_); });
  std::vector<double> sums(mine.size(), 0.0);
  for (int r = 0; r < size_; ++r)
    for (size_t i = 0; i < mine.size(); ++i) sums[i] += all[static_cast<size_t>(r) * mine.size() + i];
  return sums;
}

}  // namespace pf
