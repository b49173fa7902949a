// Small deterministic data for trainer tests.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/train/batch.h"

namespace pf::testing {

// Features [rows, dim] and labels = argmax of a fixed linear map (learnable by an MLP).
Batch teacher_batch(int64_t rows, int64_t dim, int64_t classes, uint64_t seed);

// Character windows from `text`: inputs [rows, seq_len] (ids = byte - 32, clamped), targets shifted.
Batch text_batch(const std::string& text, int64_t rows, int64_t seq_len, uint64_t seed);

// A DataSource over teacher batches, one micro-batch per call; can be told to fail at a position.
class TeacherSource : public DataSource {
 public:
  TeacherSource(int64_t rows, int64_t dim, int64_t classes) : rows_(rows), dim_(dim), classes_(classes) {}
  Batch next() override;
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }
  int64_t fail_at = -1;       // next() throws kCallbackError at this position
  int64_t bad_label_at = -1;  // the micro-batch at this position has a label out of range (the step fails)

 private:
  int64_t rows_, dim_, classes_, position_ = 0;
};

}  // namespace pf::testing
