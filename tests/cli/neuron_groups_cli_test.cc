// `pipeforge train --neuron-groups` as a user runs it: ppll's first stage split into width groups,
// each a rank with its own head, evaluated on the way; the report says how many bytes of forward
// values crossed ranks (and that no gradient did), in the amounts the layout gives; what cannot
// be split, saved or combined is refused naming the flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::run;
using pftest::run_json;

const std::string kBase =
    "train --model mlp --layers 4 --hidden 16 --features 12 --classes 5 --steps 12 --batch-size 16 "
    "--microbatches 4 --seed 3 --lr 0.01";
const std::string kGroups = kBase + " --schedule ppll --stages 2 --neuron-groups 2";

TEST(NeuronGroupsCli, TrainsEvaluatesAndCountsWhatCrossesRanks) {
  const nlohmann::json j = run_json(kGroups + " --group-diversity 0.5 --eval-every 6 --quiet");
  EXPECT_EQ(j.at("schedule"), "ppll");
  EXPECT_EQ(j.at("stages"), 3);
  EXPECT_TRUE(j.at("local_learning").get<bool>());
  const nlohmann::json& g = j.at("neuron_groups");
  EXPECT_EQ(g.at("groups"), 2);
  EXPECT_EQ(g.at("ranks"), 3);
  EXPECT_EQ(g.at("head"), "linear");
  EXPECT_EQ(g.at("layers_per_stage"), nlohmann::json::array({6, 3}));
  EXPECT_EQ(g.at("diversity_weight"), 0.5);
  // Per step: 4 micro-batches of 4 rows; each of the 2 groups sends its 8 units (f32) to the last
  // stage and to its sibling, and its 5 logits to its sibling.
  const nlohmann::json& bytes = g.at("last_step_bytes");
  EXPECT_EQ(bytes.at("stage_outputs"), 4 * 2 * 4 * 8 * 4);
  EXPECT_EQ(bytes.at("group_outputs"), 4 * 2 * 4 * 8 * 4);
  EXPECT_EQ(bytes.at("logits"), 4 * 2 * 4 * 5 * 4);
  EXPECT_EQ(bytes.at("gradients"), 0);
  ASSERT_EQ(j.at("evaluations").size(), 2u);
  EXPECT_EQ(j.at("losses").size(), 12u);
  // Without the diversity term no logits cross; the same seed trains other weights.
  const nlohmann::json plain = run_json(kGroups + " --quiet");
  EXPECT_EQ(plain.at("neuron_groups").at("last_step_bytes").at("logits"), 0);
  EXPECT_NE(plain.at("param_checksum"), j.at("param_checksum"));
  // The same command twice: the same bits (the ranks' timing does not matter).
  EXPECT_EQ(run_json(kGroups + " --quiet").at("param_checksum"), plain.at("param_checksum"));
}

TEST(NeuronGroupsCli, TheSummarySaysWhatRan) {
  const auto r = run(kGroups + " --local-head mlp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ppll with neuron groups on 3 ranks (threads of one process): 2 stages of 6+3 top-level "
                       "layers\n"
                       "every stage but the last: 2 width groups with their own mlp heads; no gradient crosses ranks\n"
                       "across ranks in the last step: 1.0 kB of stage outputs, 1.0 kB between groups, 0.0 kB of "
                       "logits\n"),
            std::string::npos)
      << r.out;
}

TEST(NeuronGroupsCli, RefusesNamingTheFlag) {
  const std::pair<std::string, std::string> cases[] = {
      {kBase + " --schedule ppll --stages 2 --neuron-groups 3", "--neuron-groups 3: layer 0 'fc0' has 16 outputs, which do not split into 3 groups"},
      {kBase + " --schedule 1f1b --stages 2 --neuron-groups 2", "--neuron-groups 2 splits local learning's stages by width: it needs a "
                                     "local-learning schedule (--schedule ppll, local-updates), not '1f1b'"},
      {kGroups + " --checkpoint ng.ckpt", "checkpoints of local-learning schedule 'ppll' are not supported yet"},
      {kBase + " --schedule ppll --stages 2 --group-diversity 0.5", "--group-diversity and --group-diversity-temperature"},
      {"train --model gpt --schedule ppll --stages 2 --neuron-groups 2 --steps 1",
       "--neuron-groups splits linear layers by width and supports feature models (MLPs) only yet"},
      {kBase + " --schedule ppll --stages 3 --neuron-groups 2 --layers-per-stage 3 2 4",
       "--neuron-groups 2: stage 1 begins with layer 3 'act1' (relu); a stage split into groups must begin with a "
       "linear"},
  };
  for (const auto& [command, says] : cases) {
    const auto r = run(command);
    EXPECT_NE(r.exit_code, 0) << command;
    EXPECT_NE(r.err.find(says), std::string::npos) << command << "\n" << r.err;
  }
}

}  // namespace
