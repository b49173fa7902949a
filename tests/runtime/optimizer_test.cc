#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/optim/optimizer.h"

namespace pf {
namespace {

Parameter make_param(std::vector<float> value, std::vector<float> grad) {
  Parameter p = make_parameter("w", {static_cast<int64_t>(value.size())}, InitSpec::zeros());
  p.value.copy_from(Tensor::from_vector({static_cast<int64_t>(value.size())}, value));
  p.grad.copy_from(Tensor::from_vector({static_cast<int64_t>(grad.size())}, grad));
  return p;
}

TEST(Sgd, PlainStepIsWMinusLrG) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kSgd;
  c.lr = 0.5f;
  auto opt = make_optimizer(c);
  Parameter p = make_param({1.0f, -2.0f}, {0.25f, 1.0f});
  opt->step({&p});
  EXPECT_FLOAT_EQ(p.value.f32()[0], 0.875f);   // 1 - 0.5*0.25
  EXPECT_FLOAT_EQ(p.value.f32()[1], -2.5f);    // -2 - 0.5*1
}

TEST(Sgd, MomentumAndWeightDecayByHand) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kSgd;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  auto opt = make_optimizer(c);
  Parameter p = make_param({1.0f}, {0.5f});
  opt->step({&p});
  // d1 = 0.5 + 0.01*1 = 0.51; buf = 0.51; w = 1 - 0.051 = 0.949
  EXPECT_FLOAT_EQ(p.value.f32()[0], 0.949f);
  opt->step({&p});
  // d2 = 0.5 + 0.00949 = 0.50949; buf = 0.9*0.51 + 0.50949 = 0.96849; w = 0.949 - 0.096849
  EXPECT_NEAR(p.value.f32()[0], 0.852151f, 1e-6);
  EXPECT_EQ(opt->state().count("w/momentum"), 1u);
}

TEST(AdamW, TwoStepsByHand) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::kAdamW;
  c.lr = 0.01f;
  c.weight_decay = 0.1f;
  c.beta1 = 0.9f;
  c.beta2 = 0.999f;
  c.eps = 1e-8f;
  auto opt = make_optimizer(c);
  Parameter p = make_param({2.0f}, {0.3f});
  opt->step({&p});
  // Step 1: w = 2*(1-0.001) = 1.998; m = 0.03; v = 0.00009; mhat = 0.3; vhat = 0.09;
  // w -= 0.01 * 0.3 / (0.3 + 1e-8) -> 1.988
  double w = 2.0 * (1 - 0.001);
  w -= 0.01 * 0.3 / (0.3 + 1e-8);
  EXPECT_NEAR(p.value.f32()[0], w, 1e-6);
  p.grad.f32()[0] = -0.1f;
  opt->step({&p});
  double m = 0.9 * 0.03 + 0.1 * -0.1, v = 0.999 * 0.00009 + 0.001 * 0.01;
  w *= 1 - 0.001;
  w -= 0.01 * (m / (1 - 0.81)) / (std::sqrt(v / (1 - 0.999 * 0.999)) + 1e-8);
  EXPECT_NEAR(p.value.f32()[0], w, 1e-6);
  EXPECT_EQ(opt->steps_taken(), 2);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheThreshold) {
  Parameter a = make_param({0, 0}, {3.0f, 0.0f});
  Parameter b = make_param({0}, {4.0f});
  EXPECT_DOUBLE_EQ(clip_grad_norm({&a, &b}, 10.0f), 5.0);
  EXPECT_FLOAT_EQ(a.grad.f32()[0], 3.0f);
  EXPECT_DOUBLE_EQ(clip_grad_norm({&a, &b}, 1.0f), 5.0);
  EXPECT_NEAR(a.grad.f32()[0], 0.6f, 1e-6);
  EXPECT_NEAR(b.grad.f32()[0], 0.8f, 1e-6);
  EXPECT_EQ(clip_scale(5.0, 0.0f), 1.0f);
}

TEST(ClipGradients, WithClippingOffComputesNoNormAndLeavesTheGradients) {
  Parameter a = make_param({0, 0}, {3.0f, 0.0f});
  Parameter b = make_param({0}, {4.0f});
  EXPECT_EQ(clip_gradients({&a, &b}, 0.0f), 0.0);
  EXPECT_EQ(a.grad.f32()[0], 3.0f);
  EXPECT_EQ(clip_gradients({&a, &b}, 1.0f), 5.0);
  EXPECT_NEAR(a.grad.f32()[0], 0.6f, 1e-6);
  EXPECT_EQ(global_norm({9.0, 16.0}), 5.0);
}

// Parameters named apart, with distinct values and gradients.
std::vector<Parameter> named_params(int count, int64_t size) {
  std::vector<Parameter> ps;
  for (int i = 0; i < count; ++i) {
    ps.push_back(make_parameter("p" + std::to_string(i), {size}, InitSpec::zeros()));
    for (int64_t j = 0; j < size; ++j) {
      ps.back().value.f32()[j] = 0.01f * static_cast<float>((i * 31 + j * 7) % 13) - 0.05f;
      ps.back().grad.f32()[j] = 0.003f * static_cast<float>((i * 17 + j * 5) % 11) - 0.015f;
    }
  }
  return ps;
}

// begin_step, then update_parameters on disjoint halves from two threads at once, gives step()'s bits
// (values and state) for both optimizers; SGD without momentum keeps no state, as step() does.
TEST(Optimizer, AStepSplitOverThreadsEqualsOneStep) {
  for (int variant = 0; variant < 3; ++variant) {
    OptimizerConfig c;
    c.kind = variant == 0 ? OptimizerConfig::Kind::kAdamW : OptimizerConfig::Kind::kSgd;
    c.momentum = variant == 1 ? 0.9f : 0.0f;
    c.weight_decay = 0.01f;
    auto whole = make_optimizer(c), split = make_optimizer(c);
    std::vector<Parameter> a = named_params(6, 257), b = named_params(6, 257);
    std::vector<Parameter*> pa, first, second;
    for (auto& p : a) pa.push_back(&p);
    for (size_t i = 0; i < b.size(); ++i) (i % 2 == 0 ? first : second).push_back(&b[i]);
    std::vector<Parameter*> pb = first;
    pb.insert(pb.end(), second.begin(), second.end());
    for (int step = 0; step < 3; ++step) {
      whole->step(pa);
      split->begin_step(pb);
      std::thread t([&] { split->update_parameters(second); });
      split->update_parameters(first);
      t.join();
    }
    EXPECT_EQ(split->steps_taken(), whole->steps_taken());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_EQ(std::memcmp(a[i].value.data<char>(), b[i].value.data<char>(), a[i].value.nbytes()), 0)
          << "variant " << variant << " parameter " << i;
    ASSERT_EQ(split->state().size(), whole->state().size()) << "variant " << variant;
    EXPECT_EQ(whole->state().empty(), variant == 2);
    for (const auto& [key, tensor] : whole->state())
      EXPECT_EQ(std::memcmp(tensor.data<char>(), split->state().at(key).data<char>(), tensor.nbytes()), 0) << key;
  }
}

TEST(OptimizerConfig, RejectsBadValuesNamingTheField) {
  OptimizerConfig c;
  c.lr = -1.0f;
  try {
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("lr"), std::string::npos);
  }
  try {
    OptimizerConfig::from_json({{"kind", "adamw"}, {"betas", 1}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("betas"), std::string::npos);
  }
  OptimizerConfig round = OptimizerConfig::from_json(OptimizerConfig().to_json());
  EXPECT_EQ(round.to_json(), OptimizerConfig().to_json());
}

}  // namespace
}  // namespace pf
