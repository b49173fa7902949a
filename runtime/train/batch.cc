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

}  // namespace pf
