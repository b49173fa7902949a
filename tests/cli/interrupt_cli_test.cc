// Ctrl-C and SIGTERM on `pipeforge train` (issue 43 item 4: exit 130, 629 steps lost): the run stops
// after the step in progress, writes the configured checkpoint, says where, and exits 128 + the
// signal; resuming from that checkpoint continues bitwise as the run that was never interrupted.

#include <gtest/gtest.h>

#include <regex>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::pipeforge_binary;
using pftest::run_json;
using pftest::run_shell;
using pftest::TempFolder;

const std::string kModel = "train --model mlp --batch-size 8 --microbatches 2 --seed 4 --lr 0.01";

// Starts a long run in the background, waits until its metrics log shows it training (so the
// signal finds the handlers installed), sends `signal`, and returns what it printed with its exit
// code as the last line ("rc=N").
CommandResult interrupted_run(const std::string& args, const std::string& log, const std::string& signal) {
  // env --default-signal: SIGINT as a terminal delivers it. A shell without job control starts
  // background commands with SIGINT ignored (and a test runner may ignore it), which the run respects.
  const std::string line = "env --default-signal=INT,TERM '" + pipeforge_binary() + "' " + args + " --metrics-log '" +
                           log + "' & pid=$!; " +
                           "for i in $(seq 1200); do [ -s '" + log + "' ] && break; sleep 0.05; done; " +
                           "kill -" + signal + " $pid; wait $pid; echo rc=$?";
  return run_shell(line);
}

int64_t stopped_step(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex("after step ([0-9]+);"))) return -1;
  return std::stoll(m[1]);
}

TEST(InterruptCli, SigintSavesTheCheckpointAndTheRunResumesBitwise) {
  const TempFolder dir("interrupt_sigint");
  const std::string ckpt = dir.path + "/run.ckpt";
  const CommandResult r =
      interrupted_run(kModel + " --steps 100000000 --quiet --checkpoint '" + ckpt + "'", dir.path + "/log", "INT");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("pipeforge train: interrupted by SIGINT after step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; checkpoint saved to " + ckpt), std::string::npos) << r.err;
  const int64_t stopped = stopped_step(r.err);
  ASSERT_GT(stopped, 0) << r.err;
  // Resumed for 2 more steps: the parameters of the run that went straight to stopped + 2.
  const nlohmann::json resumed = run_json(kModel + " --steps 2 --quiet --resume '" + ckpt + "'");
  const nlohmann::json straight = run_json(kModel + " --steps " + std::to_string(stopped + 2) + " --quiet");
  EXPECT_EQ(resumed["steps"], stopped + 2);
  EXPECT_EQ(resumed["param_checksum"], straight["param_checksum"]);
}

TEST(InterruptCli, SigtermOnAPipelineWritesTheSeriesCheckpointOfThatStep) {
  const TempFolder dir("interrupt_sigterm");
  const CommandResult r = interrupted_run(kModel + " --schedule 1f1b --stages 2 --steps 100000000 --quiet "
                                          "--checkpoint-every 1000000 --checkpoint-dir '" + dir.path + "/series'",
                                          dir.path + "/log", "TERM");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out << r.err;
  const int64_t stopped = stopped_step(r.err);
  ASSERT_GT(stopped, 0) << r.err;
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld.pfckpt", static_cast<long long>(stopped));
  EXPECT_NE(r.err.find("checkpoint saved to " + dir.path + "/series/" + name), std::string::npos) << r.err;
  // --resume with the series folder takes its newest: the interrupted step's.
  const nlohmann::json resumed =
      run_json(kModel + " --schedule 1f1b --stages 2 --steps 1 --quiet --resume '" + dir.path + "/series'");
  EXPECT_EQ(resumed["steps"], stopped + 1);
}

TEST(InterruptCli, WithoutACheckpointItSaysNothingWasSaved) {
  const TempFolder dir("interrupt_nothing");
  const CommandResult r = interrupted_run(kModel + " --steps 100000000 --quiet", dir.path + "/log", "INT");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("no checkpoint configured (--checkpoint or --checkpoint-dir)"), std::string::npos) << r.err;
}

}  // namespace
