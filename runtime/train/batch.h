// A (micro-)batch: inputs and integer targets, and the source the trainer pulls micro-batches from.
#pragma once

#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace pf {

struct Batch {
  Tensor inputs;   // f32 [B, features] or i32 [B, seq_len]
  Tensor targets;  // i32 [B] or [B, seq_len]
  int64_t rows() const { return inputs.defined() ? inputs.dim(0) : 0; }
  // Micro-batch `index` of `count` equal row slices (shares storage).
  Batch micro_batch(int index, int count) const;
  // Token batches: sequence slice `index` of `count` equal ones, steps [index T / count, (index + 1)
  // T / count) of the inputs and targets [B, T] (copies).
  Batch sequence_slice(int index, int count) const;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Fills the next micro-batch. Throws pf::Error (kCallbackError for user callbacks) on failure.
  virtual Batch next() = 0;
  // Position = number of micro-batches handed out so far; seek restores it after a checkpoint or
  // a failed step. seek should not throw (a failure there is logged, not reported).
  virtual int64_t position() const = 0;
  virtual void seek(int64_t position) = 0;
};

}  // namespace pf
