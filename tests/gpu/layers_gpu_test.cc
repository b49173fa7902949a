// Every layer and the cross-entropy loss on the GPU (CUDA tensors, runtime/layers/cuda_dispatch.h)
// against the same layer on the CPU: forward (F), input gradient (B) and accumulated weight
// gradients (W) within the kernel tests' tolerances, on random inputs and parameters. Skips
// without a CUDA device.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"
#include "runtime/layers/sequential.h"
#include "runtime/layers/transformer_block.h"
#include "tests/gpu/gpu_test_util.h"

namespace pf {
namespace {

using namespace gpu_test;

TEST(LayersGpu, Linear) {
  PF_SKIP_WITHOUT_GPU();
  for (bool bias : {true, false}) {
    Linear cpu("fc", 37, 19, bias), gpu_layer("fc", 37, 19, bias);
    compare_layer(cpu, gpu_layer, random_tensor({3, 5, 37}, 7), {3, 5, 19}, {kF32Gemm, kF32Gemm, kF32Gemm});
  }
}

TEST(LayersGpu, ReluAndGelu) {
  PF_SKIP_WITHOUT_GPU();
  ReLU relu_cpu("act"), relu_gpu("act");
  compare_layer(relu_cpu, relu_gpu, random_tensor({4, 33}, 3, -3, 3), {4, 33},
                {kF32Elementwise, kF32Elementwise, kF32Elementwise});
  GELU gelu_cpu("act"), gelu_gpu("act");
  compare_layer(gelu_cpu, gelu_gpu, random_tensor({4, 33}, 4, -4, 4), {4, 33},
                {kF32Elementwise, kF32Elementwise, kF32Elementwise});
}

TEST(LayersGpu, LayerNorm) {
  PF_SKIP_WITHOUT_GPU();
  for (int64_t dim : {8, 100, 1030}) {
    LayerNorm cpu("ln", dim), gpu_layer("ln", dim);
    compare_layer(cpu, gpu_layer, random_tensor({2, 7, dim}, 11, -2, 3), {2, 7, dim},
                  {kF32Reduction, kF32Reduction, kF32Reduction});
  }
}

TEST(LayersGpu, Embedding) {
  PF_SKIP_WITHOUT_GPU();
  Embedding cpu("embed", 13, 16, 24), gpu_layer("embed", 13, 16, 24);
  // Many repeated ids (13 tokens, 3 x 11 positions): W scatter-adds repeated rows.
  compare_layer(cpu, gpu_layer, random_ids({3, 11}, 13, 5), {3, 11, 24},
                {kF32Elementwise, kF32Elementwise, kF32Elementwise});
}

TEST(LayersGpu, Attention) {
  PF_SKIP_WITHOUT_GPU();
  CausalSelfAttention cpu("attn", 32, 4), gpu_layer("attn", 32, 4);
  compare_layer(cpu, gpu_layer, random_tensor({2, 9, 32}, 21), {2, 9, 32}, {kF32Layer, kF32Layer, kF32Layer});
}

TEST(LayersGpu, ResidualAndSequential) {
  PF_SKIP_WITHOUT_GPU();
  auto body = [] {
    std::vector<std::unique_ptr<Layer>> layers;
    layers.push_back(std::make_unique<Linear>("mlp.fc", 24, 40));
    layers.push_back(std::make_unique<GELU>("mlp.act"));
    layers.push_back(std::make_unique<Linear>("mlp.proj", 40, 24));
    return std::make_unique<Sequential>("mlp", std::move(layers));
  };
  Residual cpu("res", body()), gpu_layer("res", body());
  compare_layer(cpu, gpu_layer, random_tensor({6, 24}, 31), {6, 24}, {kF32Gemm, kF32Gemm, kF32Gemm});
}

TEST(LayersGpu, TransformerBlock) {
  PF_SKIP_WITHOUT_GPU();
  TransformerBlock cpu("blocks.0", 32, 4, 64), gpu_layer("blocks.0", 32, 4, 64);
  compare_layer(cpu, gpu_layer, random_tensor({2, 10, 32}, 41), {2, 10, 32}, {kF32Layer, kF32Layer, kF32Layer});
}

TEST(LayersGpu, CrossEntropy) {
  PF_SKIP_WITHOUT_GPU();
  CrossEntropyLoss loss;
  const Tensor logits = random_tensor({3, 7, 29}, 51, -4, 4);
  const Tensor targets = random_ids({3, 7}, 29, 52);
  SavedContext ctx_cpu, ctx_gpu;
  const float l_cpu = loss.forward(logits, targets, 0.25f, ctx_cpu);
  const float l_gpu = loss.forward(logits.to_device(gpu()), targets.to_device(gpu()), 0.25f, ctx_gpu);
  EXPECT_NEAR(l_gpu, l_cpu, 1e-6 * std::fabs(l_cpu) + 1e-7);
  const Tensor g_cpu = loss.backward(ctx_cpu);
  const Tensor g_gpu = loss.backward(ctx_gpu);
  EXPECT_EQ(g_gpu.device(), gpu());
  expect_close(g_gpu, g_cpu, kF32Elementwise, "cross_entropy grad");
  EXPECT_TRUE(ctx_gpu.empty());
}

TEST(LayersGpu, BadIdsAndTargetsAreReportedOnTheHost) {
  PF_SKIP_WITHOUT_GPU();
  Embedding embed("embed", 5, 8, 4);
  for (Parameter* p : embed.parameters()) {
    p->value = p->value.to_device(gpu());
    p->grad = p->grad.to_device(gpu());
  }
  SavedContext ctx;
  const Tensor ids = Tensor::from_ints({1, 3}, {1, 7, 2}).to_device(gpu());
  try {
    embed.forward(ids, ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("token id 7"), std::string::npos) << e.what();
  }
  CrossEntropyLoss loss;
  try {
    loss.forward(random_tensor({2, 3}, 1).to_device(gpu()), Tensor::from_ints({2}, {0, 3}).to_device(gpu()), 1.0f,
                 ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("target 3"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pf
