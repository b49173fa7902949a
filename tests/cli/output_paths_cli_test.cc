// Every file the command line writes follows one rule (runtime/core/output_file.h): a symbolic
// link, folder or FIFO at the path is refused and left as it was, missing folders are created, and
// `train` checks its output paths before it trains.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using pftest::CommandResult;
using pftest::run;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Folder {
  std::string path;
  explicit Folder(const std::string& name) : path(pftest::tmp_dir() + "/" + name) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Folder() { fs::remove_all(path); }
};

const std::string kTrain = "train --model mlp --schedule 1f1b --stages 2 --microbatches 2 --quiet";
const std::string kSimulate = "simulate --schedule 1f1b --stages 2 --microbatches 4";

TEST(OutputPaths, ASymlinkIsRefusedAndItsTargetLeftAlone) {
  Folder dir("output_symlink");
  const std::string victim = dir.path + "/victim.txt", link = dir.path + "/out";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, link);
  const struct {
    std::string args, option;
  } cases[] = {
      {kTrain + " --steps 2 --trace " + link, "--trace"},
      {kTrain + " --steps 2 --svg " + link, "--svg"},
      {kTrain + " --steps 2 --metrics-log " + link, "--metrics-log"},
      {kSimulate + " --trace " + link, "--trace"},
      {kSimulate + " --svg " + link, "--svg"},
      {"compare --schedules 1f1b,gpipe --stages 2 --microbatches 4 --html " + link, "--html"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.option + " '" + link + "' is a symbolic link"), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(read(victim), "keep me") << c.args;
    EXPECT_TRUE(fs::is_symlink(link)) << c.args;
  }
  // A dangling link creates nothing where it points.
  const std::string dangling = dir.path + "/dangling", target = dir.path + "/elsewhere.json";
  fs::create_symlink(target, dangling);
  EXPECT_NE(run(kSimulate + " --trace " + dangling).exit_code, 0);
  EXPECT_FALSE(fs::exists(target));
}

TEST(OutputPaths, TrainRefusesABadPathBeforeItTrains) {
  Folder dir("output_early");
  const CommandResult folder = run(kTrain + " --steps 1000000 --svg " + dir.path);
  EXPECT_EQ(folder.exit_code, 2) << folder.err;
  EXPECT_NE(folder.err.find("--svg '" + dir.path + "' is a directory"), std::string::npos) << folder.err;
  const std::string fifo = dir.path + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CommandResult pipe = run(kTrain + " --steps 1000000 --trace " + fifo);
  EXPECT_EQ(pipe.exit_code, 2) << pipe.err;
  EXPECT_NE(pipe.err.find("is a FIFO"), std::string::npos) << pipe.err;
}

TEST(OutputPaths, MissingFoldersAreCreatedAndTheFilesWritten) {
  Folder dir("output_folders");
  const std::string trace = dir.path + "/a/b/trace.json", svg = dir.path + "/c/step.svg";
  const CommandResult r = run(kTrain + " --steps 2 --trace " + trace + " --svg " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(read(trace).find("traceEvents"), std::string::npos);
  EXPECT_NE(read(svg).find("<svg"), std::string::npos);
  for (const auto& e : fs::directory_iterator(dir.path + "/a/b"))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "a temporary file was left: " << e.path();
  // A regular file is replaced whole.
  std::ofstream(trace) << "old";
  ASSERT_EQ(run(kTrain + " --steps 2 --trace " + trace).exit_code, 0);
  EXPECT_NE(read(trace).find("traceEvents"), std::string::npos);
}

}  // namespace
