#include "runtime/layers/cross_entropy.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

namespace {

// max over the row, and the sum of exp(x - max) in double.
struct RowStats {
  float max;
  double sum_exp;
};

float row_max(const float* x, int64_t classes) {
  float m = x[0];
  for (int64_t c = 1; c < classes; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

// The sum of exp(x - max) over the row, in double, in class order.
double sum_exp(const float* x, int64_t classes, float max) {
  double sum = 0.0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(x[c]) - max);
  return sum;
}

RowStats row_stats(const float* x, int64_t classes) {
  const float m = row_max(x, classes);
  return {m, sum_exp(x, classes, m)};
}

// The row's largest logit's class, the first of equal ones.
int64_t best_class(const float* row, int64_t classes) {
  int64_t best = 0;
  for (int64_t c = 1; c < classes; ++c)
    if (row[c] > row[best]) best = c;
  return best;
}

// One row's gradient: coef * (exp(x - max) * inv_sum - [c == target]) over its `classes` logits
// (`target` outside [0, classes): none of them is the target).
void softmax_gradient_row(const float* x, int64_t classes, float max, double inv_sum, int64_t target, double coef,
                          float* g) {
  for (int64_t c = 0; c < classes; ++c) {
    const double p = std::exp(static_cast<double>(x[c]) - max) * inv_sum;
    g[c] = static_cast<float>(coef * (c == target ? p - 1.0 : p));
  }
}

}  // namespace

float CrossEntropyLoss::forward(const Tensor& logits, const Tensor& targets, float scale,
                                SavedContext& ctx) {
  PF_CHECK_ARG(logits.defined() && logits.dtype() == DType::kF32 && logits.rank() >= 1 &&
                   logits.dim(-1) > 0 && logits.numel() > 0,
               "cross_entropy: expected non-empty f32 logits [..., C], got ",
               logits.defined() ? dtype_name(logits.dtype()) : "undefined", " ",
               shape_to_string(logits.shape()));
  const int64_t classes = logits.dim(-1) * (group_ ? group_->size() : 1);  // the whole row's
  const int64_t rows = logits.numel() / logits.dim(-1);
  PF_CHECK_ARG(targets.defined() && targets.dtype() == DType::kI32 && targets.numel() == rows,
               "cross_entropy: expected i32 targets with ", rows, " elements for logits ",
               shape_to_string(logits.shape()), ", got ",
               targets.defined() ? dtype_name(targets.dtype()) : "undefined", " ",
               shape_to_string(targets.shape()));
  PF_CHECK_ARG(std::isfinite(scale), "cross_entropy: scale must be finite, got ", scale);
  check_same_device(type(), "", "logits", logits.device(), "targets", targets.device());
  // CUDA: the targets are checked on a host copy (the kernel would turn a bad target into NaN).
  const std::vector<int32_t> host_targets = is_cuda(targets) ? cuda_backend().i32_to_host(targets) : std::vector<int32_t>();
  const int32_t* t = is_cuda(targets) ? host_targets.data() : targets.i32();
  for (int64_t r = 0; r < rows; ++r) {
    PF_CHECK_ARG(t[r] >= 0 && t[r] < classes, "cross_entropy: target ", t[r], " at row ", r,
                 " is out of range [0, ", classes, ")");
  }
  if (group_ != nullptr) return forward_split(logits, targets, scale, ctx);
  if (is_cuda(logits)) {
    ctx.save("logits", logits);
    ctx.save("targets", targets);
    ctx.save("scale", Tensor::from_vector({1}, {scale}));  // a host scalar
    return cuda_backend().cross_entropy_forward(logits, targets, scale);
  }
  const float* x = logits.f32();
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * classes;
    const RowStats s = row_stats(xr, classes);
    total += static_cast<double>(s.max) + std::log(s.sum_exp) - static_cast<double>(xr[t[r]]);
  }
  ctx.save("logits", logits);
  ctx.save("targets", targets);
  ctx.save("scale", Tensor::from_vector({1}, {scale}));
  return static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(rows));
}

bool CrossEntropyLoss::split_classes(std::shared_ptr<TensorParallelGroup> group) {
  PF_CHECK_ARG(group != nullptr, "cross_entropy: the tensor-parallel group is null");
  PF_CHECK_ARG(group_ == nullptr, "cross_entropy: the classes are already split");
  if (group->size() > 1) group_ = std::move(group);
  return true;
}

namespace {

// The per-row sums of exponentials travel as doubles; a saved tensor keeps their bits in pairs of
// floats (Tensor has no f64).
Tensor doubles_in_floats(const std::vector<double>& values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size()) * 2});
  if (!values.empty()) std::memcpy(t.f32(), values.data(), values.size() * sizeof(double));
  return t;
}

double double_at(const Tensor& t, int64_t i) {
  double v;
  std::memcpy(&v, t.f32() + 2 * i, sizeof(double));
  return v;
}

}  // namespace

float CrossEntropyLoss::forward_split(const Tensor& logits, const Tensor& targets, float scale, SavedContext& ctx) {
  // On a CUDA device the per-row parts come from the backend's kernels (host vectors), and the
  // group combines them on the host as below.
  const bool on_device = is_cuda(logits);
  const int64_t held = logits.dim(-1);
  const int64_t rows = logits.numel() / held;
  const int64_t first = held * group_->rank();
  // The row maxima: every member's, the largest taken (exact in any order).
  std::vector<float> local_max(static_cast<size_t>(rows));
  if (on_device) local_max = cuda_backend().logits_row_max(logits);
  else
    for (int64_t r = 0; r < rows; ++r) local_max[static_cast<size_t>(r)] = row_max(logits.f32() + r * held, held);
  const std::vector<float> every_max = group_->all_gather_floats(local_max, "cross_entropy row maxima");
  std::vector<float> maxima(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float m = every_max[static_cast<size_t>(r)];
    for (int p = 1; p < group_->size(); ++p) {
      const float v = every_max[static_cast<size_t>(p * rows + r)];
      m = v > m ? v : m;
    }
    maxima[static_cast<size_t>(r)] = m;
  }
  // Per row: this member's sum of exp(x - max), then the target's logit (0 where another member
  // holds it); both summed over the group in rank order.
  std::vector<double> mine(static_cast<size_t>(2 * rows), 0.0);
  if (on_device) {
    mine = cuda_backend().vocab_cross_entropy_sums(logits, targets, first, maxima);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = logits.f32() + r * held;
      mine[static_cast<size_t>(r)] = sum_exp(xr, held, maxima[static_cast<size_t>(r)]);
      const int64_t target = static_cast<int64_t>(targets.i32()[r]) - first;
      if (target >= 0 && target < held) mine[static_cast<size_t>(rows + r)] = static_cast<double>(xr[target]);
    }
  }
  const std::vector<double> sums = group_->sum_in_rank_order(mine, "cross_entropy sums");
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    total += static_cast<double>(maxima[static_cast<size_t>(r)]) + std::log(sums[static_cast<size_t>(r)]) -
             sums[static_cast<size_t>(rows + r)];
  ctx.save("logits", logits);
  ctx.save("targets", targets);
  ctx.save("row_max", Tensor::from_vector({rows}, maxima));  // host tensors, on every device
  ctx.save("sum_exp", doubles_in_floats(std::vector<double>(sums.begin(), sums.begin() + rows)));
  ctx.save("scale", Tensor::from_vector({1}, {scale}));
  return static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(rows));
}

Tensor CrossEntropyLoss::backward_split(SavedContext& ctx) {
  const Tensor logits = ctx.get("logits");
  const Tensor targets = ctx.get("targets");
  const Tensor maxima = ctx.get("row_max");
  const Tensor sums = ctx.get("sum_exp");
  const double scale = ctx.get("scale").f32()[0];
  ctx.clear();
  const int64_t held = logits.dim(-1);
  const int64_t rows = logits.numel() / held;
  const int64_t first = held * group_->rank();
  const double coef = scale / static_cast<double>(rows);
  if (is_cuda(logits)) {
    std::vector<double> inverse_sums(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) inverse_sums[static_cast<size_t>(r)] = 1.0 / double_at(sums, r);
    return cuda_backend().vocab_cross_entropy_backward(logits, targets, first, maxima.to_vector(), inverse_sums, coef);
  }
  Tensor grad = Tensor::empty(logits.shape());
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* g = grad.f32();
  for (int64_t r = 0; r < rows; ++r)
    softmax_gradient_row(x + r * held, held, maxima.f32()[r], 1.0 / double_at(sums, r),
                         static_cast<int64_t>(t[r]) - first, coef, g + r * held);
  return grad;
}

Tensor CrossEntropyLoss::backward(SavedContext& ctx) {
  if (group_ != nullptr) return backward_split(ctx);
  const Tensor logits = ctx.get("logits");
  const Tensor targets = ctx.get("targets");
  const double scale = ctx.get("scale").f32()[0];
  ctx.clear();
  if (is_cuda(logits)) return cuda_backend().cross_entropy_backward(logits, targets, static_cast<float>(scale));
  const int64_t classes = logits.dim(-1);
  const int64_t rows = logits.numel() / classes;
  const double coef = scale / static_cast<double>(rows);
  Tensor grad = Tensor::empty(logits.shape());
  const float* x = logits.f32();
  const int32_t* t = targets.i32();
  float* g = grad.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const RowStats s = row_stats(x + r * classes, classes);
    softmax_gradient_row(x + r * classes, classes, s.max, 1.0 / s.sum_exp, t[r], coef, g + r * classes);
  }
  return grad;
}

int64_t CrossEntropyLoss::count_correct(const Tensor& logits, const Tensor& targets) const {
  // Logits on a device are read on the host (evaluation only).
  const Tensor x = logits.to_host();
  const Tensor t = targets.to_host();
  PF_CHECK_ARG(x.defined() && x.dtype() == DType::kF32 && x.rank() >= 1 && x.dim(-1) > 0,
               "cross_entropy: expected f32 logits [..., C] to count correct rows");
  const int64_t classes = x.dim(-1);
  const int64_t rows = x.numel() / classes;
  PF_CHECK_ARG(t.defined() && t.dtype() == DType::kI32 && t.numel() == rows, "cross_entropy: expected i32 targets with ",
               rows, " elements to count correct rows");
  if (group_ != nullptr) return count_correct_split(x, t);
  const float* data = x.f32();
  const int32_t* target = t.i32();
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) correct += best_class(data + r * classes, classes) == target[r] ? 1 : 0;
  return correct;
}

int64_t CrossEntropyLoss::count_correct_split(const Tensor& logits, const Tensor& targets) const {
  const int64_t held = logits.dim(-1);
  const int64_t rows = logits.numel() / held;
  const int64_t first = held * group_->rank();
  // Each member's best (value, class) per row; the largest value wins, the first class of equal
  // ones (members hold increasing classes, so the lowest member of equal values).
  struct Best {
    float value;
    int32_t index;
  };
  std::vector<Best> mine(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.f32() + r * held;
    const int64_t best = best_class(row, held);
    mine[static_cast<size_t>(r)] = {row[best], static_cast<int32_t>(first + best)};
  }
  const std::vector<char> all =
      group_->all_gather(mine.data(), mine.size() * sizeof(Best), "cross_entropy best classes");
  std::vector<Best> every(mine.size() * static_cast<size_t>(group_->size()));
  std::memcpy(every.data(), all.data(), every.size() * sizeof(Best));
  const int32_t* target = targets.i32();
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    Best best = every[static_cast<size_t>(r)];
    for (int p = 1; p < group_->size(); ++p) {
      const Best& b = every[static_cast<size_t>(p * rows + r)];
      if (b.value > best.value) best = b;
    }
    correct += best.index == target[r] ? 1 : 0;
  }
  return correct;
}

}  // namespace pf
