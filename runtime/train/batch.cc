#include "runtime/train/batch.h"

#include "runtime/core/error.h"

namespace pf {

Batch Batch::micro_batch(int index, int count) const {
  PF_CHECK_ARG(count >= 1 && rows() % count == 0, "batch of ", rows(), " rows cannot be split into ", count,
               " equal micro-batches (micro_batches must divide the batch size)");
  const int64_t size = rows() / count;
  return Batch{inputs.slice_rows(index * size, (index + 1) * size),
               targets.slice_rows(index * size, (index + 1) * size)};
}

namespace {

Tensor slice_steps(const Tensor& x, int index, int count) {
  const int64_t rows = x.dim(0), steps = x.dim(1), n = steps / count;
  Tensor out = Tensor::empty({rows, n}, DType::kI32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < n; ++t) out.i32()[r * n + t] = x.i32()[r * steps + index * n + t];
  return out;
}

}  // namespace

Batch Batch::sequence_slice(int index, int count) const {
  const auto is_tokens = [](const Tensor& x) { return x.defined() && x.dtype() == DType::kI32 && x.rank() == 2; };
  PF_CHECK_ARG(is_tokens(inputs) && is_tokens(targets) && inputs.shape() == targets.shape(),
               "seq_slices applies to token batches (i32 inputs and targets [B, T]), got inputs ",
               shape_to_string(inputs.shape()), " and targets ", shape_to_string(targets.shape()));
  PF_CHECK_ARG(count >= 1 && inputs.dim(1) % count == 0 && index >= 0 && index < count, "seq_slices ", count,
               " must divide the sequence length ", inputs.dim(1));
  return Batch{slice_steps(inputs, index, count), slice_steps(targets, index, count)};
}

}  // namespace pf
