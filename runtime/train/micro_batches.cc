#include "runtime/train/micro_batches.h"

#include <string>

#include "runtime/core/log.h"

namespace pf {

std::vector<Batch> split_into_micro_batches(const Model& model, const Batch& batch, int count) {
  model.check_batch(batch.inputs, batch.targets, "batch");
  std::vector<Batch> micro;
  for (int i = 0; i < count; ++i) micro.push_back(batch.micro_batch(i, count));
  return micro;
}

std::vector<Batch> pull_micro_batches(const Model& model, DataSource& source, int count) {
  std::vector<Batch> micro;
  const int64_t start = source.position();
  try {
    for (int i = 0; i < count; ++i) {
      micro.push_back(source.next());
      model.check_batch(micro.back().inputs, micro.back().targets, "micro-batch " + std::to_string(i));
    }
  } catch (...) {
    rewind_after_failure(source, start);
    throw;
  }
  return micro;
}

void rewind_after_failure(DataSource& source, int64_t position) noexcept {
  try {
    source.seek(position);
  } catch (...) {
    try {
      log(LogLevel::kWarning, "data source: rewinding to position " + std::to_string(position) +
                                  " after a failed step also failed");
    } catch (...) {
    }
  }
}

std::vector<Batch> split_into_sequence_slices(const std::vector<Batch>& micro_batches, int slices) {
  std::vector<Batch> units;
  units.reserve(micro_batches.size() * static_cast<size_t>(slices));
  for (const Batch& b : micro_batches)
    for (int j = 0; j < slices; ++j) units.push_back(b.sequence_slice(j, slices));
  return units;
}

}  // namespace pf
