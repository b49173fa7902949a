// `pipeforge glm` as a user runs it: a libsvm file of two classes labelled 0/1 trains to a closed
// duality gap with every solver, the same objective each time; the JSON says what it did; the
// weights file holds the model; bad input is a usage error naming the file, line and column.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::run;
using pftest::run_json;
using pftest::TempFolder;

// 300 examples of 4 features, labels 0/1 from a planted hyperplane with a few flipped.
std::string write_data(const std::string& dir) {
  const std::string path = dir + "/data.svm";
  std::ofstream f(path);
  uint64_t state = 12345;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0 * 2 - 1;  // [-1, 1)
  };
  for (int i = 0; i < 300; ++i) {
    double x[4], z = 0;
    for (int j = 0; j < 4; ++j) {
      x[j] = next();
      z += (j + 1) * x[j] * (j % 2 ? -1 : 1);
    }
    const bool flip = next() > 0.9;
    f << ((z > 0) != flip ? 1 : 0);
    for (int j = 0; j < 4; ++j)
      if (std::fabs(x[j]) > 0.2) f << " " << j + 1 << ":" << x[j];
    f << "\n";
  }
  return path;
}

TEST(GlmCli, EverySolverReachesTheSameObjectiveAndSaysWhatItDid) {
  TempFolder dir("glm_cli");
  const std::string data = write_data(dir.path);
  double reference = 0;
  for (const std::string solver : {"sequential", "async --threads 2", "syscd --threads 2", "syscd --threads 1"}) {
    const nlohmann::json j = run_json("glm --loss logistic --lambda 1e-3 --tol 1e-9 --data " + data + " --solver " + solver);
    SCOPED_TRACE(solver);
    EXPECT_EQ(j.at("examples"), 300);
    EXPECT_EQ(j.at("features"), 4);
    EXPECT_TRUE(j.at("converged").get<bool>());
    EXPECT_EQ(j.at("labels"), (nlohmann::json{{"negative", 0.0}, {"positive", 1.0}}));
    EXPECT_GT(j.at("accuracy").get<double>(), 0.8);
    const double objective = j.at("objective").get<double>(), gap = j.at("duality_gap").get<double>();
    EXPECT_LE(gap, 1e-9 * objective);
    if (reference == 0) reference = objective;
    EXPECT_NEAR(objective, reference, 2e-9 * reference);
    EXPECT_GT(j.at("seconds").get<double>(), 0);
    EXPECT_FALSE(j.at("history").empty());
  }
}

TEST(GlmCli, TheSummaryAndTheWeightsFile) {
  TempFolder dir("glm_cli_weights");
  const std::string data = write_data(dir.path);
  const auto r = run("glm --loss hinge --lambda 1e-2 --solver sequential --data " + data + " --weights " + dir.path +
                     "/out/model.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("hinge, lambda 0.01, sequential on 1 thread: 300 examples x 4 features"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("training accuracy"), std::string::npos) << r.out;
  std::ifstream in(dir.path + "/out/model.json");
  const nlohmann::json model = nlohmann::json::parse(in);
  EXPECT_EQ(model.at("loss"), "hinge");
  EXPECT_EQ(model.at("weights").size(), 4u);
}

TEST(GlmCli, BadInputIsAUsageErrorNamingWhere) {
  TempFolder dir("glm_cli_bad");
  const std::string bad = dir.path + "/bad.svm";
  std::ofstream(bad) << "1 1:0.5\n0 2:x\n";
  auto r = run("glm --loss logistic --lambda 1e-3 --data " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("bad.svm': line 2, column 5: the value of feature 2 is not a finite number: 'x'"),
            std::string::npos)
      << r.err;
  r = run("glm --loss logistic --lambda 0 --data " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--lambda"), std::string::npos) << r.err;
  r = run("glm --loss logistic --lambda 1e-3 --solver sequential --threads 2 --data " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("sequential solver runs one thread"), std::string::npos) << r.err;
  const std::string three = dir.path + "/three.svm";
  std::ofstream(three) << "1 1:0.5\n0 2:1\n2 1:1\n";
  r = run("glm --loss hinge --lambda 1e-3 --data " + three);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("exactly two label values"), std::string::npos) << r.err;
  r = run("glm --loss logistic --lambda 1e-3 --data " + dir.path + "/missing.svm");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("missing.svm"), std::string::npos) << r.err;
}

}  // namespace
