#include <gtest/gtest.h>

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/tensor/tensor.h"

namespace pf {
namespace {

TEST(Tensor, ShapeSliceReshapeShareStorage) {
  Tensor t = Tensor::from_vector({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.f32()[0], 3.0f);
  rows.f32()[0] = 30.0f;
  EXPECT_EQ(t.f32()[2], 30.0f);
  EXPECT_EQ(t.reshape({6}).numel(), 6);
  EXPECT_THROW(t.reshape({4}), Error);
  EXPECT_THROW(t.slice_rows(2, 4), Error);
}

TEST(Tensor, MemoryAccountingByCategoryWithPeaks) {
  MemoryTracker& tracker = memory_tracker(Device::cpu());
  const MemoryStats before = tracker.stats();
  const int a = static_cast<int>(MemoryCategory::kActivations);
  {
    MemoryCategoryScope scope(MemoryCategory::kActivations);
    Tensor x = Tensor::empty({1024});  // 4096 bytes
    EXPECT_EQ(current_memory_category(), MemoryCategory::kActivations);
    EXPECT_EQ(tracker.stats().current[a] - before.current[a], 4096);
    Tensor y = x;  // a handle copy shares the storage: no new charge
    EXPECT_EQ(tracker.stats().current[a] - before.current[a], 4096);
  }
  const MemoryStats after = tracker.stats();
  EXPECT_EQ(after.current[a], before.current[a]);
  EXPECT_GE(after.peak[a], before.current[a] + 4096);
  EXPECT_EQ(current_memory_category(), MemoryCategory::kWorkspace);
}

TEST(Tensor, Bf16AndF16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(1.0f)), 1.0f);
  EXPECT_EQ(f16_to_f32(f32_to_f16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
  EXPECT_EQ(f16_to_f32(f32_to_f16(5.9604645e-8f)), 5.9604645e-8f);  // smallest subnormal
  // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: rounds to even (1).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  Tensor t = Tensor::from_vector({3}, {0.1f, -2.5f, 3.14159f});
  Tensor h = t.to(DType::kBF16);
  EXPECT_EQ(h.nbytes(), 6u);
  std::vector<float> back = h.to(DType::kF32).to_vector();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(back[i], t.f32()[i], std::fabs(t.f32()[i]) / 128);
}

TEST(Tensor, ParseDtypeNamesBadInput) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  try {
    parse_dtype("f64");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("f64"), std::string::npos);
  }
}

}  // namespace
}  // namespace pf

namespace pf {
namespace {

TEST(Device, ParseNamesAndLists) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("cpu:0"), Device::cpu());
  EXPECT_EQ(parse_device("cuda"), Device::cuda(0));
  EXPECT_EQ(parse_device("cuda:3"), Device::cuda(3));
  EXPECT_EQ(parse_device_list(" cuda:0, cuda:1,cuda:0 "),
            (std::vector<Device>{Device::cuda(0), Device::cuda(1), Device::cuda(0)}));
  EXPECT_TRUE(parse_device_list("").empty());
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "CUDA:0"}) {
    try {
      parse_device(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_device_list("cuda:0,,cuda:1"), Error);
  EXPECT_EQ(Device::cuda(2).to_string(), "cuda:2");
}

}  // namespace
}  // namespace pf
