// Where a step's micro-batches come from, shared by every trainer: a whole batch cut into equal
// micro-batches, or micro-batches pulled from a DataSource. Both check each (micro-)batch against the
// model's input spec; pulling rewinds the source when it fails, so a retried step sees the same data.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/train/batch.h"

namespace pf {

// Checks `batch` and cuts it into `count` equal micro-batches (sharing its storage).
std::vector<Batch> split_into_micro_batches(const Model& model, const Batch& batch, int count);

// Pulls and checks `count` micro-batches; on any failure rewinds `source` to where it was, then
// rethrows the original error.
std::vector<Batch> pull_micro_batches(const Model& model, DataSource& source, int count);

// The units of a sequence-sliced step: slice j of micro-batch mb at index mb * slices + j.
std::vector<Batch> split_into_sequence_slices(const std::vector<Batch>& micro_batches, int slices);

// Seeks `source` back to `position` after a failed step. A seek that fails as well is logged, so it
// cannot replace the error being reported.
void rewind_after_failure(DataSource& source, int64_t position) noexcept;

// A trainer's step on a data source: pulls `count` micro-batches and returns run(them); when run
// throws, rewinds `source` to where the step began (a retried step sees the same micro-batches) and
// rethrows.
template <typename Run>
auto step_on_source(const Model& model, DataSource& source, int count, const Run& run) {
  const int64_t start = source.position();
  const std::vector<Batch> micro = pull_micro_batches(model, source, count);
  try {
    return run(micro);
  } catch (...) {
    rewind_after_failure(source, start);
    throw;
  }
}

}  // namespace pf
