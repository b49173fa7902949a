#include "runtime/cpu_check/cpu_check.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace pf {
namespace {

TEST(CpuCheck, ThisBuildRequiresWhatItsFlagsSay) {
  const std::vector<std::string> required = build_required_cpu_features();
#ifdef __AVX2__
  const std::set<std::string> set(required.begin(), required.end());
  EXPECT_TRUE(set.count("avx2") && set.count("fma")) << "x86-64-v3 build, yet avx2/fma not required";
#else
  EXPECT_TRUE(required.empty()) << "portable build, yet " << required.size() << " features required";
#endif
}

TEST(CpuCheck, ThisMachineRunsThisBuild) {
  EXPECT_EQ(cpu_support_problem(), "");
  EXPECT_TRUE(cpu_supported());
}

TEST(CpuCheck, NamesEveryMissingFeatureAndTheFix) {
  const std::set<std::string> present = {"avx", "bmi"};
  static const std::set<std::string>* has_only = nullptr;
  has_only = &present;
  const std::string problem = cpu_support_problem({"avx", "avx2", "fma", "bmi"},
                                                  [](const char* f) { return has_only->count(f) > 0; });
  EXPECT_NE(problem.find("lacks avx2, fma;"), std::string::npos) << problem;
  EXPECT_NE(problem.find("--config=portable"), std::string::npos) << problem;
  EXPECT_EQ(cpu_support_problem({"avx", "bmi"}, [](const char* f) { return has_only->count(f) > 0; }), "");
}

}  // namespace
}  // namespace pf
