// A data source whose micro-batch at each position is a pure function of the position: next()
// serves batch_at(position) and moves on, seek(p) goes to p, so a resumed run sees the same data.
#pragma once

#include <cstdint>

#include "runtime/core/error.h"
#include "runtime/train/batch.h"

namespace pf {

class PositionedSource : public DataSource {
 public:
  // The micro-batch at `position`, without moving the cursor.
  virtual Batch batch_at(int64_t position) const = 0;

  Batch next() override {
    Batch batch = batch_at(position_);
    ++position_;
    return batch;
  }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override {
    PF_CHECK_ARG(position >= 0, "data position must be >= 0, got ", position);
    position_ = position;
  }

 protected:
  void rewind() { position_ = 0; }

 private:
  int64_t position_ = 0;
};

}  // namespace pf
