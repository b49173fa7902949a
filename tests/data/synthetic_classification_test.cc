#include "runtime/data/synthetic_classification.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/core/error.h"

namespace pf {
namespace {

SyntheticClassificationOptions small(uint64_t seed) {
  SyntheticClassificationOptions options;
  options.rows = 16;
  options.features = 8;
  options.classes = 5;
  options.seed = seed;
  return options;
}

TEST(SyntheticClassification, ShapesTypesAndLabelRange) {
  SyntheticClassification data(small(1));
  const Batch batch = data.next();
  EXPECT_EQ(batch.inputs.shape(), (Shape{16, 8}));
  EXPECT_EQ(batch.inputs.dtype(), DType::kF32);
  EXPECT_EQ(batch.targets.shape(), (Shape{16}));
  EXPECT_EQ(batch.targets.dtype(), DType::kI32);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_GE(batch.targets.i32()[i], 0);
    EXPECT_LT(batch.targets.i32()[i], 5);
  }
  EXPECT_EQ(data.position(), 1);
}

TEST(SyntheticClassification, LabelsComeFromTheTeacher) {
  SyntheticClassification data(small(7));
  for (int step = 0; step < 5; ++step) {
    const Batch batch = data.next();
    for (int64_t r = 0; r < 16; ++r)
      EXPECT_EQ(data.label(batch.inputs.f32() + r * 8), batch.targets.i32()[r]);
  }
  // The teacher does not depend on the sample seed: another seed labels the same point the same way.
  SyntheticClassification other(small(8));
  const Batch batch = data.batch_at(0);
  for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(other.label(batch.inputs.f32() + r * 8), batch.targets.i32()[r]);
}

TEST(SyntheticClassification, FeaturesAreStandardNormalAndEveryClassOccurs) {
  SyntheticClassification data(small(3));
  std::vector<int> counts(5, 0);
  double sum = 0, sum_sq = 0;
  int64_t n = 0;
  for (int step = 0; step < 200; ++step) {
    const Batch batch = data.next();
    for (int64_t i = 0; i < batch.inputs.numel(); ++i, ++n) {
      sum += batch.inputs.f32()[i];
      sum_sq += batch.inputs.f32()[i] * batch.inputs.f32()[i];
    }
    for (int64_t r = 0; r < 16; ++r) ++counts[batch.targets.i32()[r]];
  }
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(var, 1.0, 0.05);
  for (int c = 0; c < 5; ++c) EXPECT_GT(counts[c], 3200 / 5 / 10) << "class " << c;
}

TEST(SyntheticClassification, DeterministicFromSeedAndPosition) {
  SyntheticClassification a(small(5)), b(small(5)), c(small(6));
  std::vector<std::vector<float>> stream;
  for (int i = 0; i < 6; ++i) stream.push_back(a.next().inputs.to_vector());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(b.next().inputs.to_vector(), stream[i]);
  EXPECT_NE(c.next().inputs.to_vector(), stream[0]);
  a.seek(2);
  EXPECT_EQ(a.next().inputs.to_vector(), stream[2]);
  EXPECT_EQ(a.position(), 3);
  EXPECT_EQ(a.batch_at(5).inputs.to_vector(), stream[5]);
  EXPECT_THROW(a.seek(-3), Error);
}

TEST(SyntheticClassification, BadOptionsAreInvalidArgument) {
  auto options = small(0);
  options.classes = 1;
  EXPECT_THROW(SyntheticClassification{options}, Error);
  options = small(0);
  options.features = 0;
  EXPECT_THROW(SyntheticClassification{options}, Error);
  options = small(0);
  options.rows = 0;
  try {
    SyntheticClassification data(options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("rows"), std::string::npos);
  }
}

// The held-out split: the same teacher (labels are the teacher's argmax of the features) on
// samples of their own.
TEST(SyntheticClassification, HeldOutSamplesAreNewButLabelledByTheSameTeacher) {
  SyntheticClassificationOptions o = small(4);
  SyntheticClassification train(o);
  o.held_out = true;
  SyntheticClassification held(o);
  for (int64_t p = 0; p < 5; ++p) {
    const Batch t = train.batch_at(p), h = held.batch_at(p);
    EXPECT_NE(std::vector<float>(t.inputs.f32(), t.inputs.f32() + t.inputs.numel()),
              std::vector<float>(h.inputs.f32(), h.inputs.f32() + h.inputs.numel()));
    for (int64_t r = 0; r < 16; ++r) EXPECT_EQ(h.targets.i32()[r], train.label(h.inputs.f32() + r * 8));
  }
}

}  // namespace
}  // namespace pf
