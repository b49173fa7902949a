// Helpers of the GPU layer/optimizer/trainer tests: random host tensors, moving a CPU layer's
// parameters onto a twin layer on the GPU, F / B / W of a layer against its twin, and the tolerance check of tests/kernels/tolerances.h
// (repeated here because that package is private): a GPU value g passes against the CPU value w when
//   |g - w| <= abs * max(1, max |w| over the array) + rel * |w|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cuda_backend.h"
#include "runtime/layers/layer.h"
#include "runtime/tensor/tensor.h"

namespace pf::gpu_test {

struct Tolerance {
  double rel;
  double abs;
};
// Same values as tests/kernels/tolerances.h.
constexpr Tolerance kF32Elementwise{1e-5, 1e-6};
constexpr Tolerance kF32Reduction{1e-4, 1e-5};
constexpr Tolerance kF32Gemm{1e-4, 1e-5};
constexpr Tolerance kF32Layer{5e-4, 5e-5};

inline bool has_gpu() { return probe_cuda().device_count > 0; }

#define PF_SKIP_WITHOUT_GPU() \
  if (!::pf::gpu_test::has_gpu()) GTEST_SKIP() << "no CUDA device"

inline Device gpu() { return Device::cuda(0); }

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (float& x : v) x = dist(gen);
  return Tensor::from_vector(shape, v);
}

inline Tensor random_ids(const Shape& shape, int32_t limit, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> v(static_cast<size_t>(shape_numel(shape)));
  for (int32_t& x : v) x = dist(gen);
  return Tensor::from_ints(shape, v);
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol.abs * scale + tol.rel * std::fabs(static_cast<double>(want[i]));
    if (!(diff <= bound)) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << got[i] << " vs cpu " << want[i] << " (diff " << diff
                    << " > " << bound << ")";
      if (++reported == 5) return;
    }
  }
}

inline void expect_close(const Tensor& got, const Tensor& want, Tolerance tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  expect_close(got.to_vector(), want.to_vector(), tol, what);
}

// Gives every parameter of `cpu` random values and random (non-zero) gradients, so that W's
// accumulation (+=) is checked too, and copies both to the twin layer `gpu_layer` on the GPU.
inline void twin_parameters(Layer& cpu, Layer& gpu_layer, uint64_t seed) {
  auto pc = cpu.parameters();
  auto pg = gpu_layer.parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    ASSERT_EQ(pc[i]->name, pg[i]->name);
    pc[i]->value = random_tensor(pc[i]->value.shape(), seed + 2 * i, -0.5f, 0.5f);
    pc[i]->grad = random_tensor(pc[i]->grad.shape(), seed + 2 * i + 1, -0.1f, 0.1f);
    pg[i]->value = pc[i]->value.to_device(gpu());
    pg[i]->grad = pc[i]->grad.to_device(gpu());
  }
}

struct Tolerances {
  Tolerance f, b, w;
};

// Runs F, B, W on `cpu` (CPU tensors) and on its twin `gpu_layer` (CUDA tensors) and compares: the
// output, the input gradient (or that both have none) and every accumulated weight gradient; the
// GPU context must be empty after W.
inline void compare_layer(Layer& cpu, Layer& gpu_layer, const Tensor& input, const Shape& output_shape,
                          const Tolerances& tol, uint64_t seed = 1) {
  twin_parameters(cpu, gpu_layer, seed);
  SavedContext ctx_cpu, ctx_gpu;
  const Tensor y_cpu = cpu.forward(input, ctx_cpu);
  const Tensor y_gpu = gpu_layer.forward(input.to_device(gpu()), ctx_gpu);
  ASSERT_EQ(y_gpu.device(), gpu());
  ASSERT_EQ(y_cpu.shape(), output_shape);
  expect_close(y_gpu, y_cpu, tol.f, std::string(cpu.name()) + " F");

  const Tensor dy = random_tensor(output_shape, seed + 100);
  const Tensor dx_cpu = cpu.backward_input(ctx_cpu, dy);
  const Tensor dx_gpu = gpu_layer.backward_input(ctx_gpu, dy.to_device(gpu()));
  ASSERT_EQ(dx_cpu.defined(), dx_gpu.defined());
  if (dx_cpu.defined()) {
    EXPECT_EQ(dx_gpu.device(), gpu());
    expect_close(dx_gpu, dx_cpu, tol.b, std::string(cpu.name()) + " B");
  }

  cpu.backward_weight(ctx_cpu);
  gpu_layer.backward_weight(ctx_gpu);
  EXPECT_TRUE(ctx_gpu.empty());
  auto pc = cpu.parameters();
  auto pg = gpu_layer.parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_EQ(pg[i]->grad.device(), gpu());
    expect_close(pg[i]->grad, pc[i]->grad, tol.w, pc[i]->name + " W");
  }
}

}  // namespace pf::gpu_test
