// pf_glm_*: ridge regression through the C API reaches the normal equations' solution (written
// here) from dense arrays, CSR arrays and a libsvm file alike; a classifier's file labels map to
// ±1; bad arguments are named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "c_api/pipeforge.h"
#include "tests/c_api/test_util.h"

namespace {

// 6 examples of 2 features, with the zeros a CSR stores none of.
const float kDense[] = {1, 0, 0, 2, 1, 1, -1, 0.5f, 2, 0, 0, -1};
const double kTargets[] = {1.0, 2.0, 1.5, -0.5, 2.5, -1.0};
const int64_t kRowStart[] = {0, 1, 2, 4, 6, 7, 8};
const uint32_t kIndices[] = {0, 1, 0, 1, 0, 1, 0, 1};
const float kValues[] = {1, 2, 1, 1, -1, 0.5f, 2, -1};
constexpr double kLambda = 0.1;

// (XᵀX/n + λI) w = Xᵀy/n for d = 2.
std::vector<double> normal_equations() {
  double a[2][2] = {{0, 0}, {0, 0}}, b[2] = {0, 0};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 2; ++j) {
      b[j] += kDense[i * 2 + j] * kTargets[i] / 6;
      for (int k = 0; k < 2; ++k) a[j][k] += kDense[i * 2 + j] * kDense[i * 2 + k] / 6.0;
    }
  a[0][0] += kLambda;
  a[1][1] += kLambda;
  const double det = a[0][0] * a[1][1] - a[0][1] * a[1][0];
  return {(b[0] * a[1][1] - a[0][1] * b[1]) / det, (a[0][0] * b[1] - a[1][0] * b[0]) / det};
}

pf_glm_options RidgeOptions() {
  pf_glm_options o;
  pf_glm_options_init(&o);
  o.loss = PF_GLM_SQUARED;
  o.lambda = kLambda;
  o.tol = 1e-12;
  o.threads = 2;
  return o;
}

void ExpectNormalEquations(pf_glm_model* model) {
  ASSERT_NE(model, nullptr);
  const double* w = nullptr;
  size_t count = 0;
  ASSERT_PF_OK(pf_glm_model_weights(model, &w, &count));
  ASSERT_EQ(count, 2u);
  const std::vector<double> want = normal_equations();
  EXPECT_NEAR(w[0], want[0], 1e-6);
  EXPECT_NEAR(w[1], want[1], 1e-6);
  pf_glm_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_glm_model_result(model, &r));
  EXPECT_EQ(r.converged, 1);
  EXPECT_EQ(r.features, 2);
  EXPECT_LE(r.duality_gap, 1e-12 * r.objective + 1e-15);
  EXPECT_TRUE(std::isnan(r.accuracy));
  const char* json = nullptr;
  ASSERT_PF_OK(pf_glm_model_to_json(model, &json));
  EXPECT_NE(std::string(json).find("\"weights\""), std::string::npos);
}

TEST(GlmApi, RidgeFromDenseCsrAndFileReachesTheNormalEquations) {
  const pf_glm_options o = RidgeOptions();
  pf_glm_model* dense = nullptr;
  ASSERT_PF_OK(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &dense));
  ExpectNormalEquations(dense);
  pf_glm_model_destroy(dense);

  pf_glm_model* sparse = nullptr;
  ASSERT_PF_OK(pf_glm_train(6, 2, kRowStart, kIndices, kValues, kTargets, &o, &sparse));
  ExpectNormalEquations(sparse);
  pf_glm_model_destroy(sparse);

  const std::string path = ::testing::TempDir() + "/ridge.svm";
  {
    std::ofstream f(path);
    for (int i = 0; i < 6; ++i) {
      f << kTargets[i];
      for (int j = 0; j < 2; ++j)
        if (kDense[i * 2 + j] != 0) f << " " << j + 1 << ":" << kDense[i * 2 + j];
      f << "\n";
    }
  }
  pf_glm_model* from_file = nullptr;
  ASSERT_PF_OK(pf_glm_train_libsvm(path.c_str(), 0, &o, &from_file));
  ExpectNormalEquations(from_file);
  pf_glm_model_destroy(from_file);
}

// l1 (0.15): a μ above every |gradient| at w = 0 zeroes every weight; a caller built against the
// 0.13 struct (without l1) gets L2 only.
TEST(GlmApi, L1ZeroesWeightsAndAnOldStructHasNone) {
  pf_glm_options o = RidgeOptions();
  o.l1 = 100;
  pf_glm_model* model = nullptr;
  ASSERT_PF_OK(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model));
  const double* w = nullptr;
  size_t count = 0;
  ASSERT_PF_OK(pf_glm_model_weights(model, &w, &count));
  EXPECT_EQ(w[0], 0.0);
  EXPECT_EQ(w[1], 0.0);
  pf_glm_model_destroy(model);
  o.struct_size = 56;  // the 0.13 layout ends before l1
  ASSERT_PF_OK(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model));
  ExpectNormalEquations(model);
  pf_glm_model_destroy(model);
  o.struct_size = sizeof(o);
  o.l1 = -1;
  EXPECT_PF_ERROR(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "options->l1 must be >= 0");
}

TEST(GlmApi, AClassifiersFileLabelsBecomeMinusAndPlusOne) {
  const std::string path = ::testing::TempDir() + "/classes.svm";
  std::ofstream(path) << "0 1:1\n1 1:-1 2:1\n0 2:-1\n1 1:-2\n";
  pf_glm_options o;
  pf_glm_options_init(&o);
  o.loss = PF_GLM_HINGE;
  o.solver = PF_GLM_SEQUENTIAL;
  pf_glm_model* model = nullptr;
  ASSERT_PF_OK(pf_glm_train_libsvm(path.c_str(), 0, &o, &model));
  pf_glm_result r;
  r.struct_size = sizeof(r);
  ASSERT_PF_OK(pf_glm_model_result(model, &r));
  EXPECT_EQ(r.negative_label, 0.0);
  EXPECT_EQ(r.positive_label, 1.0);
  EXPECT_EQ(r.accuracy, 1.0);  // separable
  pf_glm_model_destroy(model);
}

TEST(GlmApi, BadArgumentsAreNamed) {
  pf_glm_options o = RidgeOptions();
  pf_glm_model* model = nullptr;
  EXPECT_PF_ERROR(pf_glm_train(0, 2, nullptr, nullptr, kDense, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "rows is 0");
  EXPECT_PF_ERROR(pf_glm_train(6, 2, kRowStart, nullptr, kValues, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "row_start and indices");
  EXPECT_PF_ERROR(pf_glm_train(6, 2, nullptr, nullptr, nullptr, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "values");
  const uint32_t beyond[] = {0, 1, 0, 1, 0, 5, 0, 1};
  EXPECT_PF_ERROR(pf_glm_train(6, 2, kRowStart, beyond, kValues, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "row 4: feature 6 of 2");
  o.lambda = 0;
  EXPECT_PF_ERROR(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "options->lambda must be > 0");
  o = RidgeOptions();
  o.loss = PF_GLM_LOGISTIC;
  EXPECT_PF_ERROR(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "row 2: label 2 is not -1 or +1");
  o.loss = 7;
  EXPECT_PF_ERROR(pf_glm_train(6, 2, nullptr, nullptr, kDense, kTargets, &o, &model), PF_INVALID_ARGUMENT,
                  "options->loss is 7");
  EXPECT_PF_ERROR(pf_glm_train_libsvm("/nonexistent/x.svm", 0, nullptr, &model), PF_NOT_FOUND, "/nonexistent/x.svm");
  EXPECT_EQ(model, nullptr);
}

}  // namespace
