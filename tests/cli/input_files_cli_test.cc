// Every file the command line reads whole follows one rule (runtime/core/input_file.h): a FIFO,
// device or folder is refused at once with its path (a FIFO used to hang the command), a file over
// its kind's size limit is refused before it is read (a sparse file here, /dev/zero used to end in
// std::bad_alloc), JSON nested too deep is refused before it is used (a 200 000-level config used
// to crash `train`), a number out of range names the file, and an existing metrics log with a line
// too long for one is refused and left as it was.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using pftest::CommandResult;
using pftest::run;

using Folder = pftest::TempFolder;

void expect_refused(const std::string& args, const std::string& message) {
  const CommandResult r = run(args);
  EXPECT_NE(r.exit_code, 0) << args;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
}

const std::string kPlanModel = " --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 2 --batch-size 8 --quiet";

TEST(InputFiles, AFifoIsRefusedAtOnceWithItsPath) {
  Folder dir("input_fifo");
  const std::string fifo = dir.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const struct {
    std::string args, message;
  } cases[] = {
      {"train --config " + fifo, "config file '" + fifo + "' is a FIFO, not a regular file"},
      {"train --plan " + fifo, "plan file '" + fifo + "' is a FIFO"},
      {"train --model-file " + fifo, "--model-file '" + fifo + "' is a FIFO"},
      {"train --model gpt --steps 1 --quiet --data " + fifo, "text file '" + fifo + "' is a FIFO"},
      {"train --schedule-file " + fifo + " --quiet", "schedule file '" + fifo + "' is a FIFO"},
      {"simulate --schedule-file " + fifo, "schedule file '" + fifo + "' is a FIFO"},
      {"plan" + kPlanModel + " --cluster " + fifo, "--cluster '" + fifo + "' is a FIFO"},
      {"plan" + kPlanModel + " --measure --profile " + fifo, "--profile '" + fifo + "' is a FIFO"},
  };
  for (const auto& c : cases) expect_refused(c.args, c.message);
}

TEST(InputFiles, DevicesFoldersAndFilesOverTheLimitAreRefusedBeforeReading) {
  Folder dir("input_limits");
  expect_refused("train --config /dev/zero", "config file '/dev/zero' is a device, not a regular file");
  expect_refused("train --model-file " + dir.path, "--model-file: File is actually a directory: " + dir.path);
  // 65 MiB without a byte on disk: over the 64 MiB limit of config and plan files.
  const std::string big = dir.path + "/big.json";
  std::ofstream(big).close();
  fs::resize_file(big, (uint64_t{65} << 20));
  expect_refused("train --plan " + big, "plan file '" + big + "' has 68157440 bytes, more than the limit of 67108864");
  expect_refused("train --config " + dir.path + "/none.json", "--config: File does not exist: " + dir.path + "/none.json");
}

TEST(InputFiles, DeepJsonAndHugeNumbersAreRefusedNamingTheFile) {
  Folder dir("input_json");
  const std::string deep = dir.path + "/deep.json";
  {
    std::ofstream out(deep);
    out << R"({"model": )";
    for (int i = 0; i < 200000; ++i) out << '[';
    for (int i = 0; i < 200000; ++i) out << ']';
    out << "}";
  }
  expect_refused("train --config " + deep, "config file '" + deep + "': JSON nested deeper than 64 levels");
  const std::string huge = dir.path + "/huge.json";
  std::ofstream(huge) << R"({"optimizer": {"lr": 1e400}})";
  expect_refused("train --config " + huge, "config file '" + huge + "': malformed JSON");
  expect_refused("train --config " + huge, "1e400");
}

TEST(InputFiles, AMetricsLogWithAnOverlongLineIsRefusedAndKept) {
  Folder dir("input_metrics");
  const std::string log = dir.path + "/log.jsonl";
  const std::string line(size_t{2} << 20, 'x');
  std::ofstream(log) << line;
  expect_refused("train --model mlp --steps 1 --quiet --metrics-log " + log,
                 "metrics log '" + log + "' line 1: longer than 1048576 bytes");
  EXPECT_EQ(fs::file_size(log), line.size());
}

}  // namespace
