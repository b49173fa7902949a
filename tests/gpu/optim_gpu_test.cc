// The optimizers and gradient clipping on CUDA parameters against the same on the CPU: three steps
// of SGD (plain, and momentum + weight decay) and AdamW, with fresh random gradients each step;
// values and optimizer state within the elementwise tolerance. Skips without a CUDA device.
#include <gtest/gtest.h>

#include "runtime/layers/parameter.h"
#include "runtime/optim/optimizer.h"
#include "tests/gpu/gpu_test_util.h"

namespace pf {
namespace {

using namespace gpu_test;

std::vector<Parameter> make_params(uint64_t seed) {
  std::vector<Parameter> params;
  const std::vector<Shape> shapes = {{17, 9}, {9}, {1000}, {3, 5, 7}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Parameter p = make_parameter("p" + std::to_string(i), shapes[i], InitSpec::zeros());
    p.value = random_tensor(shapes[i], seed + i, -1.0f, 1.0f);
    params.push_back(p);
  }
  return params;
}

std::vector<Parameter*> pointers(std::vector<Parameter>& params) {
  std::vector<Parameter*> out;
  for (Parameter& p : params) out.push_back(&p);
  return out;
}

void run_optimizer(const OptimizerConfig& config) {
  std::vector<Parameter> cpu = make_params(100), gpu_params = make_params(100);
  for (Parameter& p : gpu_params) {
    p.value = p.value.to_device(gpu());
    p.grad = p.grad.to_device(gpu());
  }
  auto opt_cpu = make_optimizer(config), opt_gpu = make_optimizer(config);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      cpu[i].grad = random_tensor(cpu[i].grad.shape(), 1000 + step * 10 + i, -0.3f, 0.3f);
      gpu_params[i].grad = cpu[i].grad.to_device(gpu());
    }
    const double norm_cpu = clip_grad_norm(pointers(cpu), config.clip_norm);
    const double norm_gpu = clip_grad_norm(pointers(gpu_params), config.clip_norm);
    EXPECT_NEAR(norm_gpu, norm_cpu, 1e-12 * norm_cpu);
    opt_cpu->step(pointers(cpu));
    opt_gpu->step(pointers(gpu_params));
  }
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_EQ(gpu_params[i].value.device(), gpu());
    expect_close(gpu_params[i].grad, cpu[i].grad, kF32Elementwise, cpu[i].name + " clipped grad");
    expect_close(gpu_params[i].value, cpu[i].value, kF32Elementwise, cpu[i].name + " value");
  }
  ASSERT_EQ(opt_gpu->state().size(), opt_cpu->state().size());
  for (auto& kv : opt_cpu->state()) {
    Tensor& s = opt_gpu->state().at(kv.first);
    EXPECT_EQ(s.device(), gpu()) << kv.first;
    expect_close(s, kv.second, kF32Elementwise, kv.first);
  }
}

TEST(OptimGpu, SgdPlain) {
  PF_SKIP_WITHOUT_GPU();
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kSgd;
  c.lr = 0.1f;
  run_optimizer(c);
}

TEST(OptimGpu, SgdMomentumWeightDecayClipped) {
  PF_SKIP_WITHOUT_GPU();
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kSgd;
  c.lr = 0.05f;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  c.clip_norm = 1.0f;  // the random gradients have a norm of about 10: clipping happens
  run_optimizer(c);
}

TEST(OptimGpu, AdamW) {
  PF_SKIP_WITHOUT_GPU();
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdamW;
  c.lr = 1e-2f;
  c.weight_decay = 0.1f;
  run_optimizer(c);
}

TEST(OptimGpu, AdamWClipped) {
  PF_SKIP_WITHOUT_GPU();
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdamW;
  c.lr = 1e-3f;
  c.clip_norm = 0.5f;
  run_optimizer(c);
}

// State created on the host (e.g. loaded from a checkpoint) follows its parameter to the GPU.
TEST(OptimGpu, HostStateFollowsTheParameter) {
  PF_SKIP_WITHOUT_GPU();
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdamW;
  std::vector<Parameter> params = make_params(7);
  auto opt = make_optimizer(c);
  for (Parameter& p : params) p.grad = random_tensor(p.grad.shape(), 9);
  opt->step(pointers(params));  // state on the CPU
  for (Parameter& p : params) {
    p.value = p.value.to_device(gpu());
    p.grad = p.grad.to_device(gpu());
  }
  opt->step(pointers(params));
  for (auto& kv : opt->state()) EXPECT_EQ(kv.second.device(), gpu()) << kv.first;
}

}  // namespace
}  // namespace pf
