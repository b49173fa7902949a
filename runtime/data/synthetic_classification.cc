#include "runtime/data/synthetic_classification.h"

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/data/random.h"

namespace pf {
namespace {

constexpr uint64_t kTeacherWeightStream = 0x54454143'48455257ull;  // "TEACHERW"
constexpr uint64_t kTeacherBiasStream = 0x54454143'48455242ull;    // "TEACHERB"
constexpr uint64_t kFeatureStream = 0x46454154'55524553ull;        // "FEATURES"
constexpr uint64_t kHeldOutFeatureStream = 0x48454c44'4f555446ull; // "HELDOUTF"

double normal_at(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b) {
  const uint64_t h = data::hash_words(seed, stream, a, b);
  return data::standard_normal(h, data::mix64(h ^ 0xA5A5A5A5A5A5A5A5ull));
}

}  // namespace

void SyntheticClassificationOptions::validate() const {
  PF_CHECK_ARG(rows >= 1, "rows must be >= 1, got ", rows);
  PF_CHECK_ARG(features >= 1, "features must be >= 1, got ", features);
  PF_CHECK_ARG(classes >= 2, "classes must be >= 2, got ", classes);
}

SyntheticClassification::SyntheticClassification(const SyntheticClassificationOptions& options)
    : options_(options) {
  options_.validate();
  const int64_t c = options_.classes, d = options_.features;
  weight_.resize(static_cast<size_t>(c * d));
  bias_.resize(static_cast<size_t>(c));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j < d; ++j) {
      weight_[static_cast<size_t>(i * d + j)] =
          scale * normal_at(options_.teacher_seed, kTeacherWeightStream, static_cast<uint64_t>(i),
                            static_cast<uint64_t>(j));
    }
    bias_[static_cast<size_t>(i)] =
        0.1 * normal_at(options_.teacher_seed, kTeacherBiasStream, static_cast<uint64_t>(i), 0);
  }
}

int32_t SyntheticClassification::label(const float* x) const {
  const int64_t c = options_.classes, d = options_.features;
  int32_t best = 0;
  double best_score = 0.0;
  for (int64_t i = 0; i < c; ++i) {
    double score = bias_[static_cast<size_t>(i)];
    const double* w = weight_.data() + i * d;
    for (int64_t j = 0; j < d; ++j) score += w[j] * static_cast<double>(x[j]);
    if (i == 0 || score > best_score) {
      best = static_cast<int32_t>(i);
      best_score = score;
    }
  }
  return best;
}

Batch SyntheticClassification::batch_at(int64_t position) const {
  const int64_t rows = options_.rows, d = options_.features;
  Batch batch;
  batch.inputs = Tensor::empty({rows, d}, DType::kF32);
  batch.targets = Tensor::empty({rows}, DType::kI32);
  float* x = batch.inputs.f32();
  int32_t* y = batch.targets.i32();
  for (int64_t r = 0; r < rows; ++r) {
    // Sample index over the whole stream: position * rows + r would tie the data to the
    // micro-batch size; keying on (position, row) keeps every micro-batch independent instead.
    const uint64_t sample = data::hash_words(static_cast<uint64_t>(position), static_cast<uint64_t>(r));
    float* row = x + r * d;
    for (int64_t j = 0; j < d; ++j) {
      row[j] = static_cast<float>(normal_at(options_.seed, options_.held_out ? kHeldOutFeatureStream : kFeatureStream, sample, static_cast<uint64_t>(j)));
    }
    y[r] = label(row);
  }
  return batch;
}

}  // namespace pf
