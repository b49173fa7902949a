// main() of a googletest binary that runs as every rank of an mpirun launch
// (tests/util/run_gtest_under_mpirun.sh, tools/gpu_check.sh): with PF_GTEST_RANK_OUTPUT set to
// "xml:DIR" or "json:DIR", each rank writes its own report, DIR/rank<R>.xml (or .json), R its launch
// rank, instead of every rank writing one file. The scripts read them: a test whose every case
// skipped itself on every rank (a GPU test without GPUs) is then reported as skipped, not passed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  // Before InitGoogleTest, which sets up the report (a --gtest_output argument still wins).
  const char* output = std::getenv("PF_GTEST_RANK_OUTPUT");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) rank = std::getenv("PMIX_RANK");
  if (output != nullptr && rank != nullptr) {
    const std::string spec(output);
    const size_t colon = spec.find(':');
    if (colon != std::string::npos) {
      const std::string format = spec.substr(0, colon);
      ::testing::GTEST_FLAG(output) = format + ":" + spec.substr(colon + 1) + "/rank" + rank + "." + format;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
