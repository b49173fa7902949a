// Mixing devices within one op is kInvalidArgument naming the layer and both devices. Runs without
// a GPU: a host-memory allocator is registered for DeviceKind::kCuda, so tensors labelled cuda:0
// exist, and every check here fails before any kernel or copy would touch them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/core/error.h"
#include "runtime/layers/activations.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/layer_norm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/residual.h"
#include "runtime/models/builders.h"
#include "runtime/optim/optimizer.h"
#include "runtime/tensor/allocator.h"

namespace pf {
namespace {

class HostAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override { return std::calloc(bytes > 0 ? bytes : 1, 1); }
  void deallocate(void* data, size_t) override { std::free(data); }
};

Allocator& fake_cuda_allocator(int) {
  static HostAllocator allocator;
  return allocator;
}

class DeviceErrors : public ::testing::Test {
 protected:
  void SetUp() override { register_device_allocator(DeviceKind::kCuda, &fake_cuda_allocator); }
  static Tensor on_cuda(const Shape& shape, DType dtype = DType::kF32) {
    return Tensor::empty(shape, dtype, Device::cuda(0));
  }
};

template <typename Fn>
void expect_mixed(Fn fn, const std::string& who, const std::string& first, const std::string& second) {
  try {
    fn();
    FAIL() << "expected kInvalidArgument for " << who;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << msg;
    EXPECT_NE(msg.find(who), std::string::npos) << msg;
    EXPECT_NE(msg.find(first), std::string::npos) << msg;
    EXPECT_NE(msg.find(second), std::string::npos) << msg;
  }
}

TEST_F(DeviceErrors, LinearForwardAndBackward) {
  Linear fc("fc", 4, 3);
  SavedContext ctx;
  expect_mixed([&] { fc.forward(on_cuda({2, 4}), ctx); }, "linear 'fc'", "input (on cuda:0)",
               "the parameters (on cpu");
  fc.forward(Tensor::zeros({2, 4}), ctx);
  expect_mixed([&] { fc.backward_input(ctx, on_cuda({2, 3})); }, "linear 'fc'",
               "output gradient (on cuda:0)", "on cpu");
}

TEST_F(DeviceErrors, Activations) {
  ReLU relu("act");
  SavedContext ctx;
  relu.forward(Tensor::zeros({2, 4}), ctx);
  expect_mixed([&] { relu.backward_input(ctx, on_cuda({2, 4})); }, "relu 'act'", "cuda:0", "cpu");
  GELU gelu("g");
  SavedContext ctx2;
  gelu.forward(Tensor::zeros({2, 4}), ctx2);
  expect_mixed([&] { gelu.backward_input(ctx2, on_cuda({2, 4})); }, "gelu 'g'", "cuda:0", "cpu");
}

TEST_F(DeviceErrors, LayerNormEmbeddingAttention) {
  SavedContext ctx;
  LayerNorm ln("ln", 4);
  expect_mixed([&] { ln.forward(on_cuda({2, 4}), ctx); }, "layernorm 'ln'", "input (on cuda:0)", "cpu");
  Embedding embed("embed", 10, 8, 4);
  expect_mixed([&] { embed.forward(on_cuda({2, 3}, DType::kI32), ctx); }, "embedding 'embed'",
               "input (on cuda:0)", "cpu");
  CausalSelfAttention attn("attn", 8, 2);
  expect_mixed([&] { attn.forward(on_cuda({1, 3, 8}), ctx); }, "attention 'attn'", "input (on cuda:0)", "cpu");
}

TEST_F(DeviceErrors, ResidualNamesTheFirstLayerThatMixes) {
  Residual res("res", std::make_unique<Linear>("res.fc", 4, 4));
  SavedContext ctx;
  expect_mixed([&] { res.forward(on_cuda({2, 4}), ctx); }, "linear 'res.fc'", "cuda:0", "cpu");
}

TEST_F(DeviceErrors, CrossEntropy) {
  CrossEntropyLoss loss;
  SavedContext ctx;
  expect_mixed([&] { loss.forward(Tensor::zeros({2, 3}), on_cuda({2}, DType::kI32), 1.0f, ctx); },
               "cross_entropy", "logits (on cpu", "targets (on cuda:0)");
}

TEST_F(DeviceErrors, OptimizerValueAndGradOnDifferentDevices) {
  Parameter p = make_parameter("w", {3}, InitSpec::zeros());
  p.grad = on_cuda({3});
  OptimizerConfig config;
  auto opt = make_optimizer(config);
  expect_mixed([&] { opt->step({&p}); }, "parameter 'w'", "value (on cpu", "grad (on cuda:0)");
  EXPECT_EQ(opt->steps_taken(), 0);
}

TEST_F(DeviceErrors, ModelDeviceDefaultsToTheCpu) {
  MlpConfig config;
  auto model = build_mlp(config);
  EXPECT_EQ(model->device(), Device::cpu());
  model->to_device(Device::cpu());  // no copies, nothing changes
  EXPECT_EQ(model->device(), Device::cpu());
  for (Parameter* p : model->parameters()) EXPECT_EQ(p->value.device(), Device::cpu());
}

}  // namespace
}  // namespace pf
