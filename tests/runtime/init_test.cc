#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "runtime/models/builders.h"
#include "runtime/models/init.h"

namespace pf {
namespace {

TEST(Init, ValueDependsOnlyOnSeedAndName) {
  Parameter a = make_parameter("blocks.3.attn.qkv.weight", {64, 16}, InitSpec::normal(0.02f));
  Parameter b = make_parameter("blocks.3.attn.qkv.weight", {64, 16}, InitSpec::normal(0.02f));
  Parameter other = make_parameter("blocks.3.attn.proj.weight", {64, 16}, InitSpec::normal(0.02f));
  initialize_parameter(a, 7);
  initialize_parameters({&other, &b}, 7);  // order and company do not matter
  EXPECT_EQ(std::memcmp(a.value.f32(), b.value.f32(), a.value.nbytes()), 0);
  EXPECT_NE(std::memcmp(a.value.f32(), other.value.f32(), a.value.nbytes()), 0);
  Parameter c = make_parameter("blocks.3.attn.qkv.weight", {64, 16}, InitSpec::normal(0.02f));
  initialize_parameter(c, 8);
  EXPECT_NE(std::memcmp(a.value.f32(), c.value.f32(), a.value.nbytes()), 0);
}

TEST(Init, NormalHasTheRequestedMoments) {
  Parameter p = make_parameter("w", {100000}, InitSpec::normal(0.5f));
  initialize_parameter(p, 1);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < p.value.numel(); ++i) {
    sum += p.value.f32()[i];
    sq += static_cast<double>(p.value.f32()[i]) * p.value.f32()[i];
  }
  const double mean = sum / p.value.numel(), stddev = std::sqrt(sq / p.value.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stddev, 0.5, 0.01);
}

TEST(Init, ShorterModelSharesThePrefixParametersOfALongerOne) {
  // A stage that builds only part of the model must see the same initial values as the full model.
  GptConfig small;
  small.layers = 1;
  GptConfig big = small;
  big.layers = 3;
  auto a = build_gpt(small);
  auto b = build_gpt(big);
  initialize_parameters(a->parameters(), 42);
  initialize_parameters(b->parameters(), 42);
  for (Parameter* p : a->parameters()) {
    Parameter* q = b->find_parameter(p->name);
    ASSERT_NE(q, nullptr) << p->name;
    EXPECT_EQ(std::memcmp(p->value.f32(), q->value.f32(), p->value.nbytes()), 0) << p->name;
  }
}

}  // namespace
}  // namespace pf
