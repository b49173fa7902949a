// Every file the command line writes follows one rule (runtime/core/output_file.h): a symbolic
// link, folder or FIFO at the path is refused and left as it was, missing folders are created, and
// `train` checks its output paths before it trains. A plan file may choose no output path, a config
// file only one inside the current folder.
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

using Folder = pftest::TempFolder;

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

// Runs in `folder` (relative paths from a config file resolve there) and comes back.
CommandResult run_in(const std::string& folder, const std::string& args) {
  const fs::path before = fs::current_path();
  fs::current_path(folder);
  const CommandResult r = run(args);
  fs::current_path(before);
  return r;
}

TEST(OutputPaths, APlanChoosesNoOutputPathAndAConfigOnlyInsideTheCurrentFolder) {
  Folder dir("output_trust");
  const std::string victim = dir.path + "/victim.txt";
  std::ofstream(victim) << "keep me";
  // A plan received from someone else: each output field is refused, the file named stays.
  for (const std::string field : {R"("logging": {"trace": "V"})", R"("logging": {"svg": "V"})",
                                  R"("logging": {"metrics_log": "V"})", R"("checkpointing": {"save": "V"})",
                                  R"("checkpointing": {"dir": "V"})", R"("memory": {"offload_dir": "V"})"}) {
    std::string text = field;
    text.replace(text.find('V'), 1, victim);
    const std::string plan = dir.path + "/plan.json";
    std::ofstream(plan) << R"({"format": "pipeforge.plan/1", "train_config": {)" << text << "}}";
    const CommandResult r = run(kTrain + " --steps 1 --plan " + plan);
    EXPECT_EQ(r.exit_code, 2) << text << "\n" << r.err;
    EXPECT_NE(r.err.find("a plan may not choose where the run writes ('" + victim + "')"), std::string::npos)
        << text << "\n" << r.err;
    EXPECT_EQ(read(victim), "keep me") << text;
  }
  // A config file: not an absolute path, not '..', not through a symbolic link; the command line
  // may still name any path.
  fs::create_directories(dir.path + "/work/sub");
  fs::create_symlink(dir.path, dir.path + "/work/up");
  const std::string config = dir.path + "/work/config.json";
  const struct {
    std::string path, message;
  } refused[] = {
      {victim, "'" + victim + "' is not inside the current folder"},
      {"sub/../../victim.txt", "'sub/../../victim.txt' leaves the current folder"},
      {"up/victim.txt", "'up/victim.txt' goes through the symbolic link 'up'"},
  };
  for (const auto& c : refused) {
    std::ofstream(config) << R"({"logging": {"trace": ")" << c.path << R"("}})";
    const CommandResult r = run_in(dir.path + "/work", kTrain + " --steps 1 --config " + config);
    EXPECT_EQ(r.exit_code, 2) << c.path << "\n" << r.err;
    EXPECT_NE(r.err.find("logging.trace: " + c.message), std::string::npos) << c.path << "\n" << r.err;
    EXPECT_NE(r.err.find("give --trace on the command line instead"), std::string::npos) << r.err;
    EXPECT_EQ(read(victim), "keep me") << c.path;
  }
  std::ofstream(config) << R"({"logging": {"trace": "sub/trace.json"}})";
  const CommandResult inside = run_in(dir.path + "/work", kTrain + " --steps 1 --config " + config);
  ASSERT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_NE(read(dir.path + "/work/sub/trace.json").find("traceEvents"), std::string::npos);
  const std::string elsewhere = dir.path + "/elsewhere.json";
  const CommandResult flag = run_in(dir.path + "/work", kTrain + " --steps 1 --config " + config + " --trace " + elsewhere);
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_NE(read(elsewhere).find("traceEvents"), std::string::npos);
}

}  // namespace
