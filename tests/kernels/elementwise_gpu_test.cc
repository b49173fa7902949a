// Elementwise kernels (conversion, add, bias, ReLU, GELU) against the CPU.
#include "runtime/kernels/cuda/elementwise.h"

#include <gtest/gtest.h>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/activations.h"
#include "runtime/tensor/dtype.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;
const std::vector<int64_t> kSizes = {1, 31, 256, 1000, 65537};

TEST(ElementwiseGpu, ConversionsMatchDtypeBitwise) {
  PF_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    std::vector<float> v = random_vector(n, n, -1e4f, 1e4f);
    if (n > 4) {
      v[0] = std::numeric_limits<float>::quiet_NaN();
      v[1] = std::numeric_limits<float>::infinity();
      v[2] = 1e-40f;  // subnormal
      v[3] = -0.0f;
    }
    DeviceBuffer<float> in(v);
    DeviceBuffer<bf16> out(n);
    DeviceBuffer<float> back(n);
    cuda::convert_f32_to_bf16(nullptr, n, in.get(), out.get());
    cuda::convert_bf16_to_f32(nullptr, n, out.get(), back.get());
    const std::vector<bf16> got = out.download();
    const std::vector<float> got_back = back.download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i].bits, f32_to_bf16(v[i])) << "n " << n << " i " << i;
      const float want = bf16_to_f32(got[i].bits);
      ASSERT_EQ(std::memcmp(&got_back[i], &want, 4), 0) << "n " << n << " i " << i;
    }
  }
}

template <typename T>
void check_add_and_bias(int64_t rows, int64_t cols) {
  const std::vector<float> a = as_stored<T>(random_vector(rows * cols, 1)), b = as_stored<T>(random_vector(rows * cols, 2));
  const std::vector<float> bias = as_stored<T>(random_vector(cols, 3));
  std::vector<float> sum(rows * cols), filled(rows * cols);
  std::vector<float> dbias = random_vector(cols, 4), dbias_start = dbias;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      sum[r * cols + c] = a[r * cols + c] + b[r * cols + c];
      filled[r * cols + c] = bias[c];
      dbias[c] += a[r * cols + c];  // the CPU Linear's order: rows in order
    }
  }
  auto da = upload_as<T>(a), db = upload_as<T>(b), dbias_in = upload_as<T>(bias);
  DeviceBuffer<T> out(rows * cols), fill(rows * cols);
  DeviceBuffer<float> grad(dbias_start);
  cuda::add<T>(nullptr, rows * cols, da.get(), db.get(), out.get());
  cuda::fill_rows_with_bias<T>(nullptr, rows, cols, dbias_in.get(), fill.get());
  cuda::bias_backward<T>(nullptr, rows, cols, da.get(), grad.get());
  EXPECT_TRUE(all_close(download_f32(out), as_stored<T>(sum), pick<T>(kF32Elementwise, kBf16Elementwise)));
  EXPECT_TRUE(all_close(download_f32(fill), filled, kF32Elementwise));
  EXPECT_TRUE(all_close(grad.download(), dbias, kF32Reduction));
}

TEST(ElementwiseGpu, AddAndBiasMatchCpu) {
  PF_REQUIRE_GPU();
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {300, 64}, {1025, 97}}) {
    check_add_and_bias<float>(rows, cols);
    check_add_and_bias<bf16>(rows, cols);
  }
}

template <typename T>
void check_activation(bool gelu, int64_t n) {
  const std::vector<float> x = as_stored<T>(random_vector(n, 5, -6.0f, 6.0f));
  const std::vector<float> dy = as_stored<T>(random_vector(n, 6));
  std::unique_ptr<Layer> layer;
  if (gelu) layer = std::make_unique<GELU>("act");
  else layer = std::make_unique<ReLU>("act");
  SavedContext ctx;
  const std::vector<float> y = layer->forward(tensor({n}, x), ctx).to_vector();
  const std::vector<float> dx = layer->backward_input(ctx, tensor({n}, dy)).to_vector();
  auto dxin = upload_as<T>(x), ddy = upload_as<T>(dy);
  DeviceBuffer<T> dyout(n), ddx(n);
  if (gelu) {
    cuda::gelu_forward<T>(nullptr, n, dxin.get(), dyout.get());
    cuda::gelu_backward<T>(nullptr, n, dxin.get(), ddy.get(), ddx.get());
  } else {
    cuda::relu_forward<T>(nullptr, n, dxin.get(), dyout.get());
    cuda::relu_backward<T>(nullptr, n, dxin.get(), ddy.get(), ddx.get());
  }
  const Tolerance tol = pick<T>(kF32Elementwise, kBf16Elementwise);
  EXPECT_TRUE(all_close(download_f32(dyout), y, tol)) << (gelu ? "gelu" : "relu") << " forward, n " << n;
  EXPECT_TRUE(all_close(download_f32(ddx), dx, tol)) << (gelu ? "gelu" : "relu") << " backward, n " << n;
}

TEST(ElementwiseGpu, ReluAndGeluMatchTheLayers) {
  PF_REQUIRE_GPU();
  for (int64_t n : kSizes) {
    for (bool gelu : {false, true}) {
      check_activation<float>(gelu, n);
      check_activation<bf16>(gelu, n);
    }
  }
}

}  // namespace
}  // namespace pf::test
