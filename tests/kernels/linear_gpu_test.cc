// cuBLAS gemm and the Linear layer (reference and cuBLASLt epilogue paths) against the CPU.
#include "runtime/kernels/cuda/linear.h"

#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/gemm.h"
#include "runtime/layers/linear.h"
#include "tests/kernels/cpu_reference.h"
#include "tests/kernels/device_buffer.h"
#include "tests/kernels/test_util.h"

namespace pf::test {
namespace {

using cuda::bf16;

struct Dims {
  int64_t m, n, k;
};
const std::vector<Dims> kDims = {{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {129, 33, 257}, {256, 384, 1024}};

template <typename T>
void check_gemm(const Dims& d, bool ta, bool tb) {
  const std::vector<float> a = as_stored<T>(random_vector(d.m * d.k, 1));
  const std::vector<float> b = as_stored<T>(random_vector(d.k * d.n, 2));
  const std::vector<float> c0 = as_stored<T>(random_vector(d.m * d.n, 3));
  std::vector<float> want = c0;
  cpu::gemm(ta, tb, d.m, d.n, d.k, 0.5f, a.data(), b.data(), 2.0f, want.data());
  auto da = upload_as<T>(a), db = upload_as<T>(b), dc = upload_as<T>(c0);
  cuda::gemm<T, T>(nullptr, ta, tb, d.m, d.n, d.k, 0.5f, da.get(), db.get(), 2.0f, dc.get());
  EXPECT_TRUE(all_close(download_f32(dc), want, pick<T>(kF32Gemm, kBf16Gemm)))
      << "m " << d.m << " n " << d.n << " k " << d.k << " ta " << ta << " tb " << tb;
  if (kIsBf16<T>) {  // bf16 inputs, fp32 output
    DeviceBuffer<float> dcf(c0);
    cuda::gemm<T, float>(nullptr, ta, tb, d.m, d.n, d.k, 0.5f, da.get(), db.get(), 2.0f, dcf.get());
    EXPECT_TRUE(all_close(dcf.download(), want, kBf16WeightGrad));
  }
}

TEST(GemmGpu, MatchesCpuGemmForAllTransposes) {
  PF_REQUIRE_GPU();
  for (const Dims& d : kDims) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        check_gemm<float>(d, ta, tb);
        check_gemm<bf16>(d, ta, tb);
      }
    }
  }
}

TEST(GemmGpu, StridedBatchedOnColumnSlices) {
  PF_REQUIRE_GPU();
  // C_h = A_h B_h^T where A_h, B_h are column slices [rows, hd] of [rows, heads*hd] matrices.
  const int64_t rows = 19, heads = 3, hd = 8, width = heads * hd;
  const std::vector<float> a = random_vector(rows * width, 1), b = random_vector(rows * width, 2);
  std::vector<float> want(heads * rows * rows);
  std::vector<float> ah(rows * hd), bh(rows * hd);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < hd; ++i) {
        ah[r * hd + i] = a[r * width + h * hd + i];
        bh[r * hd + i] = b[r * width + h * hd + i];
      }
    }
    cpu::gemm(false, true, rows, rows, hd, 1.0f, ah.data(), bh.data(), 0.0f, want.data() + h * rows * rows);
  }
  DeviceBuffer<float> da(a), db(b), dc(heads * rows * rows);
  cuda::gemm_strided_batched<float, float>(nullptr, false, true, rows, rows, hd, 1.0f, da.get(), width, hd,
                                           db.get(), width, hd, 0.0f, dc.get(), rows, rows * rows, heads);
  EXPECT_TRUE(all_close(dc.download(), want, kF32Gemm));
}

// Runs without a GPU too: sizes are checked before cuBLAS is touched.
TEST(GemmGpu, BadSizesThrow) {
  float* null_c = nullptr;
  const int64_t too_big = int64_t{1} << 32;
  try {
    cuda::gemm<float, float>(nullptr, false, false, too_big, 1, 1, 1.0f, nullptr, nullptr, 0.0f, null_c);
    FAIL() << "expected pf::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("int range"), std::string::npos) << e.what();
  }
}

template <typename T>
void check_linear(int64_t rows, int64_t in, int64_t out, const cuda::LinearOptions& options) {
  const std::vector<float> x = as_stored<T>(random_vector(rows * in, 1));
  const std::vector<float> w = as_stored<T>(random_vector(out * in, 2, -0.2f, 0.2f));
  const std::vector<float> b = as_stored<T>(random_vector(out, 3));
  const std::vector<float> dy = as_stored<T>(random_vector(rows * out, 4));
  Linear lin("fc", in, out);
  set_value(lin.parameters()[0], w);
  set_value(lin.parameters()[1], b);
  SavedContext ctx;
  const std::vector<float> y = lin.forward(tensor({rows, in}, x), ctx).to_vector();
  const std::vector<float> dx = lin.backward_input(ctx, tensor({rows, out}, dy)).to_vector();
  lin.backward_weight(ctx);
  const std::vector<float> dw = lin.parameters()[0]->grad.to_vector();
  const std::vector<float> db = lin.parameters()[1]->grad.to_vector();

  auto gx = upload_as<T>(x), gw = upload_as<T>(w), gb = upload_as<T>(b), gdy = upload_as<T>(dy);
  DeviceBuffer<T> gy(rows * out), gdx(rows * in), pre(rows * out), act(rows * out);
  DeviceBuffer<float> gdw(out * in), gdb(out);
  cuda::linear_forward<T>(nullptr, rows, in, out, gx.get(), gw.get(), gb.get(), gy.get(), options);
  cuda::linear_backward_input<T>(nullptr, rows, in, out, gdy.get(), gw.get(), gdx.get(), options);
  cuda::linear_backward_weight<T>(nullptr, rows, in, out, gx.get(), gdy.get(), gdw.get(), gdb.get(), options);
  const Tolerance tol = pick<T>(kF32Gemm, kBf16Gemm);
  EXPECT_TRUE(all_close(download_f32(gy), y, tol)) << "forward " << rows << "x" << in << "x" << out;
  EXPECT_TRUE(all_close(download_f32(gdx), dx, tol)) << "backward_input";
  EXPECT_TRUE(all_close(gdw.download(), dw, pick<T>(kF32Gemm, kBf16WeightGrad))) << "dW";
  EXPECT_TRUE(all_close(gdb.download(), db, kF32Reduction)) << "db";
  // W accumulates: a second call doubles the gradients.
  cuda::linear_backward_weight<T>(nullptr, rows, in, out, gx.get(), gdy.get(), gdw.get(), gdb.get(), options);
  std::vector<float> dw2 = dw;
  for (auto& v : dw2) v *= 2.0f;
  EXPECT_TRUE(all_close(gdw.download(), dw2, pick<T>(kF32Gemm, kBf16WeightGrad))) << "dW accumulated";

  // Linear + GELU: pre-activation and output against y and the CPU GELU formula.
  cuda::linear_gelu_forward<T>(nullptr, rows, in, out, gx.get(), gw.get(), gb.get(), pre.get(), act.get(),
                               options);
  std::vector<float> gelu_y(y.size());
  for (size_t i = 0; i < y.size(); ++i) gelu_y[i] = cuda::gelu_forward(y[i]);
  EXPECT_TRUE(all_close(download_f32(pre), y, tol)) << "linear_gelu pre-activation";
  EXPECT_TRUE(all_close(download_f32(act), gelu_y,
                        options.lt_gelu_epilogue ? pick<T>(kF32LtGelu, kBf16Gemm) : tol))
      << "linear_gelu output";
}

TEST(LinearGpu, MatchesCpuLinearOnBothPaths) {
  PF_REQUIRE_GPU();
  for (auto [rows, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 1}, {5, 7, 3}, {33, 64, 96}, {200, 129, 65}, {512, 256, 1024}}) {
    for (int path = 0; path < 3; ++path) {
      cuda::LinearOptions options;
      options.lt_bias_epilogue = path >= 1;
      options.lt_gelu_epilogue = path == 2;
      check_linear<float>(rows, in, out, options);
      check_linear<bf16>(rows, in, out, options);
    }
  }
}

}  // namespace
}  // namespace pf::test
