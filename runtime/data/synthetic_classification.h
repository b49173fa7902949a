// A synthetic classification task for the MLP: features x ~ N(0, I) in `features` dimensions and
// the label argmax_c (W x + b)_c of a fixed random linear teacher (W ~ N(0, 1/features), b ~
// N(0, 0.1^2)). The teacher depends only on teacher_seed, so runs with different data seeds learn
// the same problem; each micro-batch is a pure function of (seed, position), so seek(position)
// reproduces the stream exactly. The held-out split (held_out = true) draws its features from a
// stream of its own, so it never repeats a training sample. The classes are linearly separable: an MLP drives the loss well
// below log(classes).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/positioned_source.h"
#include "runtime/train/batch.h"

namespace pf {

struct SyntheticClassificationOptions {
  int64_t rows = 8;  // rows per micro-batch
  int64_t features = 32;
  int64_t classes = 10;
  uint64_t seed = 0;                  // the samples
  uint64_t teacher_seed = 0x7EAC4E5;  // the labelling function
  bool held_out = false;              // the held-out split (same teacher, other samples)
  void validate() const;              // kInvalidArgument naming the field
};

class SyntheticClassification : public PositionedSource {
 public:
  explicit SyntheticClassification(const SyntheticClassificationOptions& options);

  // inputs: f32 [rows, features]; targets: i32 [rows] in [0, classes).
  Batch batch_at(int64_t position) const override;
  // The teacher's label for one feature vector.
  int32_t label(const float* features) const;
  const SyntheticClassificationOptions& options() const { return options_; }

 private:
  SyntheticClassificationOptions options_;
  std::vector<double> weight_;  // [classes, features]
  std::vector<double> bias_;    // [classes]
};

}  // namespace pf
