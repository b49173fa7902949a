// The Llama, ResNet and Vision Transformer layers on the GPU (CUDA tensors, runtime/layers/cuda_dispatch.h)
// against the same layer on the CPU: forward (F), input gradient (B) and accumulated weight gradients
// (W) on random inputs and parameters, within the kernel tests' tolerances (tests/kernels/tolerances.h,
// repeated in gpu_test_util.h): RMSNorm, SwiGLU, grouped-query attention with rotary positions,
// bidirectional attention, the Llama block, Conv2d (im2col + cuBLAS), max / average / global pooling,
// GroupNorm, a ResNet residual block with a projection shortcut, the ViT patch embedding and class
// token, and the position-free token embedding kernel. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/class_token.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/group_norm.h"
#include "runtime/layers/llama_block.h"
#include "runtime/layers/patch_embedding.h"
#include "runtime/layers/pooling.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/rms_norm.h"
#include "runtime/layers/sequential.h"
#include "tests/gpu/gpu_test_util.h"

namespace pf {
namespace {

using namespace gpu_test;

constexpr Tolerances kReduction{kF32Reduction, kF32Reduction, kF32Reduction};
constexpr Tolerances kGemm{kF32Gemm, kF32Gemm, kF32Gemm};
constexpr Tolerances kElementwise{kF32Elementwise, kF32Elementwise, kF32Elementwise};
constexpr Tolerances kComposed{kF32Layer, kF32Layer, kF32Layer};

TEST(ModelLayersGpu, RmsNorm) {
  PF_SKIP_WITHOUT_GPU();
  for (int64_t dim : {8, 100, 1030}) {
    RMSNorm cpu("norm", dim), gpu_layer("norm", dim);
    compare_layer(cpu, gpu_layer, random_tensor({2, 7, dim}, 11, -2, 3), {2, 7, dim}, kReduction);
  }
}

TEST(ModelLayersGpu, SwiGlu) {
  PF_SKIP_WITHOUT_GPU();
  SwiGLU cpu("act"), gpu_layer("act");
  compare_layer(cpu, gpu_layer, random_tensor({3, 5, 2 * 37}, 13, -4, 4), {3, 5, 37}, kElementwise);
}

TEST(ModelLayersGpu, GroupedQueryAttentionWithRotaryPositions) {
  PF_SKIP_WITHOUT_GPU();
  // kv_heads 4 (one key/value head per query head), 2 (groups of 2) and 1 (multi-query); with and
  // without rotation and biases.
  struct Case {
    int64_t kv_heads;
    float rope_theta;
    bool bias;
  };
  for (const Case& c : {Case{4, 10000.0f, false}, Case{2, 10000.0f, false}, Case{1, 500000.0f, false},
                        Case{2, 0.0f, true}}) {
    SCOPED_TRACE("kv_heads " + std::to_string(c.kv_heads) + ", rope_theta " + std::to_string(c.rope_theta));
    AttentionOptions options;
    options.kv_heads = c.kv_heads;
    options.rope_theta = c.rope_theta;
    options.bias = c.bias;
    CausalSelfAttention cpu("attn", 32, 4, 0.02f, options), gpu_layer("attn", 32, 4, 0.02f, options);
    compare_layer(cpu, gpu_layer, random_tensor({2, 9, 32}, 21), {2, 9, 32}, kComposed);
  }
}

TEST(ModelLayersGpu, BidirectionalAttention) {
  PF_SKIP_WITHOUT_GPU();
  for (int64_t kv_heads : {4, 2}) {
    AttentionOptions options;
    options.kv_heads = kv_heads;
    options.causal = false;
    CausalSelfAttention cpu("attn", 32, 4, 0.02f, options), gpu_layer("attn", 32, 4, 0.02f, options);
    compare_layer(cpu, gpu_layer, random_tensor({2, 11, 32}, 23), {2, 11, 32}, kComposed);
  }
}

TEST(ModelLayersGpu, LlamaBlock) {
  PF_SKIP_WITHOUT_GPU();
  LlamaBlockConfig config;
  config.dim = 32;
  config.heads = 4;
  config.kv_heads = 2;
  config.mlp_hidden = llama_default_mlp_hidden(32);
  LlamaBlock cpu("blocks.0", config), gpu_layer("blocks.0", config);
  compare_layer(cpu, gpu_layer, random_tensor({2, 10, 32}, 41), {2, 10, 32}, kComposed);
}

TEST(ModelLayersGpu, Conv2d) {
  PF_SKIP_WITHOUT_GPU();
  struct Case {
    int64_t kernel, stride, padding;
    bool bias;
  };
  // Overlapping windows (3x3, stride 1 and 2, padding), a 1x1 projection, sizes not multiples of anything.
  for (const Case& c : {Case{3, 1, 1, true}, Case{3, 2, 1, false}, Case{1, 2, 0, false}, Case{2, 1, 0, true}}) {
    SCOPED_TRACE("kernel " + std::to_string(c.kernel) + ", stride " + std::to_string(c.stride));
    Conv2dOptions options;
    options.kernel = c.kernel;
    options.stride = c.stride;
    options.padding = c.padding;
    options.bias = c.bias;
    Conv2d cpu("conv", 3, 5, options), gpu_layer("conv", 3, 5, options);
    const int64_t oh = cpu.output_size(7), ow = cpu.output_size(6);
    compare_layer(cpu, gpu_layer, random_tensor({2, 3, 7, 6}, 51), {2, 5, oh, ow}, kGemm);
  }
  // Image rows [B, C H W].
  Conv2dOptions rows;
  rows.padding = 1;
  rows.height = 5;
  rows.width = 4;
  Conv2d cpu("conv", 2, 4, rows), gpu_layer("conv", 2, 4, rows);
  compare_layer(cpu, gpu_layer, random_tensor({3, 2 * 5 * 4}, 53), {3, 4, 5, 4}, kGemm);
}

TEST(ModelLayersGpu, Pooling) {
  PF_SKIP_WITHOUT_GPU();
  // Max pooling compares values copied from the input (exact), and B adds the same terms in the same
  // order as the CPU; average pooling sums in window order.
  for (const auto& [mode, kernel, stride] :
       {std::tuple{Pool2d::Mode::kMax, 2, 2}, std::tuple{Pool2d::Mode::kMax, 3, 1},
        std::tuple{Pool2d::Mode::kAverage, 2, 1}, std::tuple{Pool2d::Mode::kAverage, 3, 2}}) {
    Pool2d cpu("pool", mode, kernel, stride), gpu_layer("pool", mode, kernel, stride);
    const int64_t oh = (7 - kernel) / stride + 1, ow = (8 - kernel) / stride + 1;
    compare_layer(cpu, gpu_layer, random_tensor({2, 3, 7, 8}, 61), {2, 3, oh, ow}, kElementwise);
  }
  GlobalAvgPool cpu("gap"), gpu_layer("gap");
  compare_layer(cpu, gpu_layer, random_tensor({2, 3, 5, 4}, 63), {2, 3}, kReduction);
  compare_layer(cpu, gpu_layer, random_tensor({2, 3, 300}, 64), {2, 3}, kReduction);
}

TEST(ModelLayersGpu, GroupNorm) {
  PF_SKIP_WITHOUT_GPU();
  GroupNorm cpu("gn", 8, 4), gpu_layer("gn", 8, 4);
  compare_layer(cpu, gpu_layer, random_tensor({2, 8, 5, 6}, 71, -2, 3), {2, 8, 5, 6}, kReduction);
  GroupNorm cpu1("gn", 6, 6), gpu1("gn", 6, 6);
  compare_layer(cpu1, gpu1, random_tensor({3, 6, 301}, 72, -2, 3), {3, 6, 301}, kReduction);
}

// A ResNet basic block with a projection shortcut (Residual with a shortcut on CUDA tensors).
TEST(ModelLayersGpu, ResidualBlockWithShortcut) {
  PF_SKIP_WITHOUT_GPU();
  auto block = [] {
    Conv2dOptions first;
    first.stride = 2;
    first.padding = 1;
    first.bias = false;
    Conv2dOptions projection;
    projection.kernel = 1;
    projection.stride = 2;
    projection.bias = false;
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<Conv2d>("res.0", 4, 8, first));
    body.push_back(std::make_unique<GroupNorm>("res.1", 8, 4));
    body.push_back(std::make_unique<ReLU>("res.2"));
    std::vector<std::unique_ptr<Layer>> path;
    path.push_back(std::make_unique<Conv2d>("res.shortcut.0", 4, 8, projection));
    path.push_back(std::make_unique<GroupNorm>("res.shortcut.1", 8, 4));
    return std::make_unique<Residual>("res", std::make_unique<Sequential>("res.body", std::move(body)),
                                      std::make_unique<Sequential>("res.shortcut", std::move(path)));
  };
  auto cpu = block(), gpu_layer = block();
  compare_layer(*cpu, *gpu_layer, random_tensor({2, 4, 8, 8}, 81), {2, 8, 4, 4}, kComposed);
}

TEST(ModelLayersGpu, PatchEmbeddingAndClassToken) {
  PF_SKIP_WITHOUT_GPU();
  PatchEmbeddingConfig config;
  config.channels = 3;
  config.height = 8;
  config.width = 12;
  config.patch = 4;
  config.dim = 16;
  PatchEmbedding cpu("embed", config), gpu_layer("embed", config);
  compare_layer(cpu, gpu_layer, random_tensor({2, 3 * 8 * 12}, 91), {2, 1 + 6, 16}, kGemm);
  ClassToken cpu_pool("pool"), gpu_pool("pool");
  compare_layer(cpu_pool, gpu_pool, random_tensor({3, 5, 7}, 93), {3, 7}, kElementwise);
}

// The token embedding without learned positions (Llama's), at the backend level: the kernels take
// no position table. (runtime/layers/embedding.cc still refuses it on CUDA tensors.)
TEST(ModelLayersGpu, EmbeddingWithoutPositionsKernels) {
  PF_SKIP_WITHOUT_GPU();
  Embedding cpu("embed", 13, 16, 24, 0.02f, /*positions=*/false);
  cpu.parameters()[0]->value = random_tensor({13, 24}, 95);
  cpu.parameters()[0]->grad = random_tensor({13, 24}, 96, -0.1f, 0.1f);
  const Tensor ids = random_ids({3, 11}, 13, 97);
  SavedContext ctx;
  const Tensor y_cpu = cpu.forward(ids, ctx);
  const Tensor dy = random_tensor({3, 11, 24}, 98);
  cpu.backward_input(ctx, dy);
  const Tensor token_grad = cpu.parameters()[0]->grad.to_device(gpu());  // before W: the GPU adds to it too
  cpu.backward_weight(ctx);

  const Tensor ids_gpu = ids.to_device(gpu());
  const Tensor y_gpu =
      cuda_backend().embedding_forward(ids_gpu, cpu.parameters()[0]->value.to_device(gpu()), Tensor());
  expect_close(y_gpu, y_cpu, kF32Elementwise, "embedding F");
  cuda_backend().embedding_backward_weight(ids_gpu, dy.to_device(gpu()), token_grad, Tensor());
  expect_close(token_grad, cpu.parameters()[0]->grad, kF32Elementwise, "embedding W");
}

}  // namespace
}  // namespace pf
