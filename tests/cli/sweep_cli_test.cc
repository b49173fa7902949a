// `pipeforge sweep` as a user runs it: a grid from flags trains together and comes back ranked, one
// entry per model; --check-alone trains some models alone and finds the same held-out losses; a
// JSON spec with a CSV file beside it, overridden by flags; bad input is a usage error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::run;
using pftest::run_json;
using pftest::TempFolder;

TEST(SweepCli, AGridFromFlagsTrainsTogetherAndComesBackRanked) {
  const nlohmann::json j = run_json(
      "sweep --hidden 4,8 --activations relu,gelu,tanh --lr 0.02,0.005 --repeats 2 --samples 300 --features 6 "
      "--classes 3 --epochs 3 --batch 16 --threads 2 --check-alone 3 --quiet");
  EXPECT_EQ(j.at("model_count"), 24);
  EXPECT_EQ(j.at("threads"), 2);
  EXPECT_EQ(j.at("steps_per_model"), 3 * 15);  // 240 training rows in batches of 16
  const nlohmann::json& models = j.at("models");
  ASSERT_EQ(models.size(), 24u);
  std::set<int64_t> indices;
  double previous = 0;
  for (const nlohmann::json& m : models) {
    indices.insert(m.at("index").get<int64_t>());
    const int64_t hidden = m.at("hidden");
    EXPECT_TRUE(hidden == 4 || hidden == 8);
    const std::string activation = m.at("activation");
    EXPECT_TRUE(activation == "relu" || activation == "gelu" || activation == "tanh") << activation;
    EXPECT_TRUE(m.at("seed") == 0 || m.at("seed") == 1);
    EXPECT_EQ(m.at("parameters"), hidden * 7 + 3 * (hidden + 1));
    const double loss = m.at("held_out_loss");
    EXPECT_GE(loss, previous) << "ranked by held-out loss";
    previous = loss;
    EXPECT_GE(m.at("held_out_accuracy").get<double>(), 0.0);
    EXPECT_LE(m.at("held_out_accuracy").get<double>(), 1.0);
  }
  EXPECT_EQ(indices.size(), 24u);
  EXPECT_GT(models[0].at("held_out_accuracy").get<double>(), 0.6);
  const nlohmann::json& alone = j.at("check_alone");
  EXPECT_EQ(alone.at("models").size(), 3u);
  EXPECT_LT(alone.at("max_relative_difference").get<double>(), 1e-5);
  EXPECT_GT(alone.at("speedup").get<double>(), 0);
  for (const nlohmann::json& m : alone.at("models"))
    EXPECT_NEAR(m.at("alone_held_out_loss").get<double>(), m.at("packed_held_out_loss").get<double>(),
                1e-5 * m.at("alone_held_out_loss").get<double>());
}

TEST(SweepCli, TheTableSaysWhatRanAndHowManyMoreThereAre) {
  const auto r = run("sweep --hidden 4,8,16 --repeats 2 --samples 200 --epochs 2 --threads 1 --top 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 models trained together on 1 thread: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data: synthetic: 160 training rows, 40 held out, 16 features, 4 classes"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" rank  model  hidden activation"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("... 4 more (--top 0 lists every model)"), std::string::npos) << r.out;
}

TEST(SweepCli, ASpecFileWithItsCsvBesideItAndFlagsOverIt) {
  TempFolder dir("sweep_cli_spec");
  {
    std::ofstream csv(dir.path + "/rows.csv");
    for (int i = 0; i < 120; ++i) {
      const double a = (i * 37 % 100) / 50.0 - 1, b = (i * 53 % 100) / 50.0 - 1;
      csv << a << "," << b << "," << (a + b > 0.3 ? 2 : a > b ? 1 : 0) << "\n";
    }
    std::ofstream(dir.path + "/spec.json") << R"({"data": "rows.csv", "hidden": [3, 5], "activations": ["sigmoid"],
                                                  "epochs": 4, "batch": 8, "held_out": 0.25, "optimizer": "sgd",
                                                  "momentum": 0.9, "lr": [0.1]})";
  }
  const nlohmann::json j =
      run_json("sweep --spec " + dir.path + "/spec.json --epochs 2 --threads 1 --results " + dir.path + "/out/r.json");
  EXPECT_EQ(j.at("model_count"), 2);
  EXPECT_EQ(j.at("steps_per_model"), 2 * 12);  // --epochs over the spec's 4; 90 training rows in batches of 8
  EXPECT_EQ(j.at("spec").at("optimizer"), "sgd");
  EXPECT_NE(j.at("data").get<std::string>().find("90 training rows, 30 held out, 2 features, 3 classes"),
            std::string::npos);
  std::ifstream saved(dir.path + "/out/r.json");
  EXPECT_EQ(nlohmann::json::parse(saved).at("models"), j.at("models"));

  std::ofstream(dir.path + "/escape.json") << R"({"data": "../rows.csv"})";
  auto r = run("sweep --spec " + dir.path + "/escape.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("must stay inside the file's folder"), std::string::npos) << r.err;
  std::ofstream(dir.path + "/typo.json") << R"({"hiden": [3]})";
  r = run("sweep --spec " + dir.path + "/typo.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("hiden"), std::string::npos) << r.err;
}

TEST(SweepCli, BadInputIsAUsageErrorNamingIt) {
  auto r = run("sweep --activations relu,swish");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("swish"), std::string::npos) << r.err;
  r = run("sweep --data /nonexistent/rows.csv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("/nonexistent/rows.csv"), std::string::npos) << r.err;
  r = run("sweep --hidden 8 --repeats 4194304 --lr 1,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the grid holds"), std::string::npos) << r.err;
}

}  // namespace

namespace {

TEST(SweepFillCli, ASweepFillsA1f1bRunsBubblesWithoutChangingItsResults) {
  TempFolder dir("sweep_fill_cli");
  std::ofstream(dir.path + "/grid.json") << R"({"hidden": [4, 8], "activations": ["relu", "tanh"], "repeats": 2,
                                               "samples": 200, "features": 6, "classes": 3, "epochs": 2})";
  const std::string run_line = "train --model gpt --d-model 32 --layers 2 --seq-len 16 --schedule 1f1b --stages 2 "
                               "--steps 6 --batch-size 8 --microbatches 4";
  const nlohmann::json plain = run_json(run_line + " --quiet");
  const nlohmann::json filled = run_json(run_line + " --quiet --fill sweep:" + dir.path + "/grid.json");
  EXPECT_EQ(filled.at("param_checksum"), plain.at("param_checksum")) << "the fill job changed the main job";
  EXPECT_EQ(filled.at("losses"), plain.at("losses"));
  EXPECT_FALSE(plain.contains("fill"));
  const nlohmann::json& fill = filled.at("fill");
  EXPECT_EQ(fill.at("kind"), "sweep");
  EXPECT_EQ(fill.at("model_count"), 8);
  EXPECT_EQ(fill.at("shards"), 2);
  EXPECT_GT(fill.at("steps_taken").get<int64_t>(), 0) << "no bubble was filled";
  EXPECT_LE(fill.at("steps_taken").get<int64_t>(), fill.at("steps_total").get<int64_t>());
  EXPECT_GT(fill.at("fill_seconds").get<double>(), 0);
  EXPECT_GT(fill.at("fill_seconds_per_step").get<double>(), 0);
  EXPECT_EQ(fill.at("models").size(), 8u);

  const auto text = run(run_line + " --fill sweep:" + dir.path + "/grid.json");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("fill: sweep of 8 models: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ms of fill work per step"), std::string::npos) << text.out;
}

TEST(SweepFillCli, AFillJobWhereNoBubbleCanTakeItIsRefusedNamingWhy) {
  TempFolder dir("sweep_fill_refused");
  std::ofstream(dir.path + "/grid.json") << R"({"hidden": [4]})";
  const std::string fill = " --fill sweep:" + dir.path + "/grid.json";
  auto r = run("train --model mlp --steps 2" + fill);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fill runs in a pipeline's bubbles and needs a synchronous schedule (--schedule"),
            std::string::npos)
      << r.err;
  r = run("train --model mlp --steps 2 --schedule pipedream --stages 2" + fill);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--fill is not supported with schedule 'pipedream'"), std::string::npos) << r.err;
  r = run("train --model mlp --steps 2 --schedule 1f1b --stages 2 --fill grid.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown fill job 'grid.json' (known: sweep:FILE)"), std::string::npos) << r.err;
  r = run("train --model mlp --steps 2 --schedule 1f1b --stages 2 --fill sweep:" + dir.path + "/missing.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing.json"), std::string::npos) << r.err;
}

}  // namespace
