// `pipeforge train --adapt`: with rank 1 emulated 8x slow, 1F1B on two ranks moves layers off
// rank 1 live, says so on stderr, in --json and in the metrics log, trains bitwise like the
// sequential run, checkpoints after the move resume; what adaptation does not support is refused
// naming the option.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::tmp_dir;

// A GPT of 7 top-level layers (4 blocks, the embedding, the final LayerNorm and the head).
const std::string kModel =
    "train --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 4 --batch-size 8 --microbatches 4 --seed 3 "
    "--lr 0.01";
// 8x, far above the 1.5x threshold: the detector divides by a profile timed once at startup, and
// this model's layers take microseconds, which a loaded 2-core machine times noisily (at 4x one
// run in a loaded full-suite run never saw 3 slow steps in a row).
const std::string kAdapt = " --schedule 1f1b --stages 2 --adapt --slow-rank 1 --slow-factor 8";

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST(AdaptCli, MovesLayersOffTheSlowRankAndTrainsBitwiseLikeTheSequentialRun) {
  const nlohmann::json sequential = run_json(kModel + " --steps 8 --quiet");
  const nlohmann::json adapted = run_json(kModel + kAdapt + " --steps 8 --quiet");
  ASSERT_TRUE(adapted.contains("adaptations")) << adapted.dump();
  ASSERT_FALSE(adapted["adaptations"].empty()) << "rank 1 at 8x never triggered a re-partition";
  const nlohmann::json& first = adapted["adaptations"][0];
  EXPECT_LT(first["to"][1].get<int>(), first["from"][1].get<int>()) << first.dump();
  EXPECT_GT(first["slowdown"][1].get<double>(), 1.5) << first.dump();
  // Patience 3: the third slow step in a row decides, so never before step 3 (a noise-sized early
  // step of this small model may reset the count and delay it).
  EXPECT_GE(first["step"].get<int>(), 3) << first.dump();
  EXPECT_EQ(adapted["losses"], sequential["losses"]);  // JSON numbers round-trip: bitwise
  EXPECT_EQ(adapted["param_checksum"], sequential["param_checksum"]);
  // A decision moves the layers before the next step: one taken at the last step (a loaded machine
  // can see rank 1 slow again after the first move) has not moved them when the run ends.
  const nlohmann::json& last = adapted["adaptations"].back();
  EXPECT_EQ(adapted["partition"]["layers_per_stage"], last["step"].get<int>() < 8 ? last["to"] : last["from"])
      << adapted["adaptations"].dump();
}

TEST(AdaptCli, PrintsTheMoveAndLogsIt) {
  const std::string log = tmp_dir() + "/adapt_metrics.jsonl";
  const CommandResult r = run(kModel + kAdapt + " --steps 8 --metrics-log '" + log + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> lines = read_lines(log);
  ASSERT_EQ(lines.size(), 8u);
  // The first move: at step 3 or later (patience 3; see above), logged on its step's line and
  // printed naming that step.
  size_t k = 0;
  while (k < lines.size() && !lines[k].contains("adaptation")) ++k;
  ASSERT_LT(k, lines.size()) << "rank 1 at 8x never triggered a re-partition";
  EXPECT_GE(k, 2u) << "before the patience of 3 steps";
  EXPECT_EQ(lines[k]["adaptation"]["step"], k + 1);
  EXPECT_LT(lines[k]["adaptation"]["to"][1].get<int>(), lines[k]["adaptation"]["from"][1].get<int>());
  EXPECT_NE(r.err.find("pipeforge train: step " + std::to_string(k + 1) + ": rank 1 ran "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("slower than predicted for 3 steps; re-partitioned "), std::string::npos) << r.err;
  const CommandResult quiet = run(kModel + kAdapt + " --steps 4 --quiet");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("re-partitioned"), std::string::npos) << quiet.err;
}

TEST(AdaptCli, ACheckpointAfterTheMoveResumes) {
  const std::string checkpoint = tmp_dir() + "/adapted.pfckpt";
  const nlohmann::json sequential = run_json(kModel + " --steps 7 --quiet");
  const nlohmann::json before = run_json(kModel + kAdapt + " --steps 5 --checkpoint '" + checkpoint + "' --quiet");
  ASSERT_FALSE(before["adaptations"].empty());
  const nlohmann::json after =
      run_json(kModel + kAdapt + " --steps 2 --resume '" + checkpoint + "' --quiet");
  ASSERT_EQ(after["losses"].size(), 2u);
  EXPECT_EQ(after["losses"][0], sequential["losses"][5]);
  EXPECT_EQ(after["losses"][1], sequential["losses"][6]);
  EXPECT_EQ(after["param_checksum"], sequential["param_checksum"]);
}

TEST(AdaptCli, ReadsASavedProfileAndAConfigFile) {
  const std::string dir = tmp_dir();
  const std::string model = " --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 4 --seed 3 --batch-size 8";
  const CommandResult saved = run("plan" + model + " --measure --ranks 2 --max-microbatches 4 --calibration-steps 0 "
                                  "--save-profile '" + dir + "/profile.json' --out '' --svg '' --quiet");
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  const std::string args = kModel + kAdapt + " --steps 5 --partition balanced --profile '" + dir + "/profile.json'";
  const nlohmann::json adapted = run_json(args + " --quiet");
  ASSERT_FALSE(adapted["adaptations"].empty());
  EXPECT_LT(adapted["adaptations"][0]["to"][1].get<int>(), adapted["adaptations"][0]["from"][1].get<int>());
  EXPECT_EQ(adapted["losses"], run_json(kModel + " --steps 5 --quiet")["losses"]);
  const CommandResult printed = run(args + " --print-config");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  const nlohmann::json config = nlohmann::json::parse(printed.out);
  EXPECT_EQ(config["adaptation"]["enabled"], true);
  EXPECT_EQ(config["adaptation"]["slow_rank"], 1);
  EXPECT_EQ(config["adaptation"]["patience"], 3);
  std::ofstream(dir + "/run.json") << printed.out;
  const nlohmann::json from_file = run_json("train --quiet --config '" + dir + "/run.json'");
  EXPECT_EQ(from_file["losses"], adapted["losses"]);
  EXPECT_FALSE(from_file["adaptations"].empty());
}

TEST(AdaptCli, RefusesWhatAdaptationDoesNotSupportNamingTheOption) {
  const struct {
    std::string args, named;
  } cases[] = {
      {" --adapt", "--adapt needs a synchronous schedule"},
      {" --schedule pipedream --stages 2 --adapt", "--adapt is not supported with schedule 'pipedream'"},
      {" --schedule ppll --stages 2 --adapt", "--adapt is not supported with schedule 'ppll'"},
      {" --schedule 1f1b --stages 2 --data-parallel 2 --adapt", "--adapt is not supported with --data-parallel 2"},
      {" --schedule 1f1b --stages 2 --adapt-patience 2", "need --adapt"},
      {" --schedule 1f1b --stages 2 --slow-rank 2 --slow-factor 4", "--slow-rank 2 is not a rank"},
      {" --slow-rank 0 --slow-factor 4", "--slow-rank and --slow-factor need --schedule"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run(kModel + " --steps 2 --quiet" + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.named), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
