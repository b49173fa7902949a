#include <gtest/gtest.h>

#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/devices/vector_add.h"

namespace pf {
namespace {

TEST(CudaProbe, NeverFailsAndExplainsAbsence) {
  CudaAvailability a = probe_cuda();
  EXPECT_GE(a.device_count, 0);
  if (a.device_count == 0) {
    EXPECT_FALSE(a.reason.empty());
  }
}

TEST(CudaSmoke, VectorAddOnTheGpu) {
  if (probe_cuda().device_count == 0) GTEST_SKIP() << "no CUDA device: " << probe_cuda().reason;
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * i;
  }
  ASSERT_EQ(cuda::vector_add_on_device(a.data(), b.data(), c.data(), n), 0);
  for (int i = 0; i < n; ++i) ASSERT_EQ(c[i], 1.5f * i);
}

}  // namespace
}  // namespace pf
