#include <cblas.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
TEST(Toolchain, Links) {
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
  EXPECT_EQ(c[3], 4.f);
  int n = -1;
  cudaGetDeviceCount(&n);
  EXPECT_GE(n, 0);
}
