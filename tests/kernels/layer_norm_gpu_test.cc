// LayerNorm F/B/W against the CPU layer, and W's determinism.
#include "runtime/kernels/cuda/layer_norm.h"

#include <gtest/gtest.h>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/layer_norm.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;

template <typename T>
void check_layer_norm(int64_t rows, int64_t dim) {
  const float eps = 1e-5f;
  const std::vector<float> x = as_stored<T>(random_vector(rows * dim, 1, -2.0f, 3.0f));
  const std::vector<float> gamma = as_stored<T>(random_vector(dim, 2, 0.5f, 1.5f));
  const std::vector<float> beta = as_stored<T>(random_vector(dim, 3));
  const std::vector<float> dy = as_stored<T>(random_vector(rows * dim, 4));
  const std::vector<float> residual = as_stored<T>(random_vector(rows * dim, 5));
  LayerNorm ln("ln", dim, eps);
  set_value(ln.parameters()[0], gamma);
  set_value(ln.parameters()[1], beta);
  SavedContext ctx;
  const std::vector<float> y = ln.forward(tensor({rows, dim}, x), ctx).to_vector();
  const std::vector<float> dx = ln.backward_input(ctx, tensor({rows, dim}, dy)).to_vector();
  ln.backward_weight(ctx);
  const std::vector<float> dgamma = ln.parameters()[0]->grad.to_vector();
  const std::vector<float> dbeta = ln.parameters()[1]->grad.to_vector();
  std::vector<float> dx_res(dx.size());
  for (size_t i = 0; i < dx.size(); ++i) dx_res[i] = residual[i] + dx[i];

  auto gx = upload_as<T>(x), gg = upload_as<T>(gamma), gb = upload_as<T>(beta), gdy = upload_as<T>(dy);
  auto gres = upload_as<T>(residual);
  DeviceBuffer<T> gy(rows * dim), gdx(rows * dim), gdx_res(rows * dim);
  DeviceBuffer<float> mean(rows), rstd(rows), dg(dim), db(dim);
  cuda::layer_norm_forward<T>(nullptr, rows, dim, eps, gx.get(), gg.get(), gb.get(), gy.get(), mean.get(), rstd.get());
  cuda::layer_norm_backward_input<T>(nullptr, rows, dim, gx.get(), mean.get(), rstd.get(), gg.get(), gdy.get(),
                                     nullptr, gdx.get());
  cuda::layer_norm_backward_input<T>(nullptr, rows, dim, gx.get(), mean.get(), rstd.get(), gg.get(), gdy.get(),
                                     gres.get(), gdx_res.get());
  cuda::layer_norm_backward_weight<T>(nullptr, rows, dim, gx.get(), mean.get(), rstd.get(), gdy.get(), dg.get(),
                                      db.get());
  const Tolerance tol = pick<T>(kF32Reduction, kBf16Reduction);
  EXPECT_TRUE(all_close(download_f32(gy), y, tol)) << "forward " << rows << "x" << dim;
  EXPECT_TRUE(all_close(download_f32(gdx), dx, tol)) << "backward_input";
  EXPECT_TRUE(all_close(download_f32(gdx_res), dx_res, tol)) << "backward_input + residual";
  // W reads only fp32 values derived from T inputs, accumulating in fp32.
  EXPECT_TRUE(all_close(dg.download(), dgamma, kF32Reduction)) << "dgamma";
  EXPECT_TRUE(all_close(db.download(), dbeta, kF32Reduction)) << "dbeta";
}

TEST(LayerNormGpu, MatchesCpuLayer) {
  PF_REQUIRE_GPU();
  for (auto [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {3, 7}, {17, 64}, {100, 255}, {64, 1024}, {9, 4097}}) {
    check_layer_norm<float>(rows, dim);
    check_layer_norm<bf16>(rows, dim);
  }
}

TEST(LayerNormGpu, WeightGradientIsBitwiseDeterministic) {
  PF_REQUIRE_GPU();
  const int64_t rows = 4099, dim = 769;
  DeviceBuffer<float> x(random_vector(rows * dim, 1)), dy(random_vector(rows * dim, 2));
  DeviceBuffer<float> gamma(random_vector(dim, 3)), beta(random_vector(dim, 4)), y(rows * dim);
  DeviceBuffer<float> mean(rows), rstd(rows);
  cuda::layer_norm_forward<float>(nullptr, rows, dim, 1e-5f, x.get(), gamma.get(), beta.get(), y.get(), mean.get(),
                                  rstd.get());
  std::vector<float> first_g, first_b;
  for (int run = 0; run < 3; ++run) {
    DeviceBuffer<float> dg(dim), db(dim);
    cuda::layer_norm_backward_weight<float>(nullptr, rows, dim, x.get(), mean.get(), rstd.get(), dy.get(), dg.get(),
                                            db.get());
    const std::vector<float> g = dg.download(), b = db.download();
    if (run == 0) {
      first_g = g;
      first_b = b;
    } else {
      EXPECT_EQ(std::memcmp(g.data(), first_g.data(), dim * 4), 0) << "run " << run;
      EXPECT_EQ(std::memcmp(b.data(), first_b.data(), dim * 4), 0) << "run " << run;
    }
  }
}

}  // namespace
}  // namespace pf::test
