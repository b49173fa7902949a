// `pipeforge train` with a config file, evaluation, a learning-rate schedule, periodic
// checkpoints and a metrics log: a config reproduces the command line bitwise, a run resumed
// from its checkpoint folder ends where one run ends, and bad config fields are named by path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::tmp_dir;

const std::string kPipelined =
    "train --model gpt --steps 8 --batch-size 4 --microbatches 2 --seq-len 16 --d-model 16 --heads 2 --layers 2 "
    "--schedule zb-h1 --stages 2 --seed 4 --lr 0.01 --lr-schedule cosine --warmup-steps 2 --quiet";

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = tmp_dir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TrainConfig, APrintedConfigReproducesTheCommandLineBitwise) {
  const nlohmann::json direct = run_json(kPipelined);
  const CommandResult printed = run(kPipelined + " --print-config");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  const nlohmann::json config = nlohmann::json::parse(printed.out);
  EXPECT_EQ(config["schedule"]["name"], "zb-h1");
  EXPECT_EQ(config["trainer"]["lr_schedule"]["kind"], "cosine");
  EXPECT_EQ(config["model"]["layers"], 2);
  const std::string path = write_file("run.json", printed.out);
  const nlohmann::json from_file = run_json("train --quiet --config '" + path + "'");
  EXPECT_EQ(from_file.at("param_checksum"), direct.at("param_checksum"));
  EXPECT_EQ(from_file.at("losses"), direct.at("losses"));
  EXPECT_EQ(from_file.at("partition"), direct.at("partition"));
  // The command line wins over the file.
  const nlohmann::json other = run_json("train --quiet --config '" + path + "' --seed 5");
  EXPECT_EQ(other.at("seed"), 5);
  EXPECT_NE(other.at("param_checksum"), direct.at("param_checksum"));
}

TEST(TrainConfig, AModelGivenInlineOrAsAFileTrains) {
  const std::string model =
      R"({"input": {"kind": "features", "features": 6, "classes": 3},
          "layers": [{"type": "linear", "in": 6, "out": 8}, {"type": "relu"}, {"type": "linear", "in": 8, "out": 3}],
          "loss": "cross_entropy"})";
  const std::string model_path = write_file("model.json", model);
  const nlohmann::json by_file =
      run_json("train --quiet --steps 20 --batch-size 8 --model-file '" + model_path + "' --schedule 1f1b --stages 3");
  EXPECT_EQ(by_file.at("model"), "json");
  EXPECT_EQ(by_file.at("partition").at("layers_per_stage"), nlohmann::json::array({1, 1, 1}));
  EXPECT_LT(by_file.at("loss").get<double>(), by_file.at("first_loss").get<double>());
  const std::string config = write_file(
      "inline.json", R"({"model": {"json": )" + model + R"(}, "trainer": {"steps": 20, "batch_size": 8},
                         "schedule": {"name": "1f1b", "ranks": 3}})");
  const nlohmann::json inline_model = run_json("train --quiet --config '" + config + "'");
  EXPECT_EQ(inline_model.at("param_checksum"), by_file.at("param_checksum"));
}

TEST(TrainConfig, BadFieldsAreNamedByTheirJsonPath) {
  const struct {
    const char* config;
    const char* message;
  } cases[] = {
      {R"({"trainer": {"stpes": 3}})", "trainer.stpes: unknown field; did you mean 'trainer.steps'?"},
      {R"({"trainer": {"steps": "many"}})", "trainer.steps"},
      {R"({"trainer": {"steps": 0}})", "trainer.steps"},
      {R"({"schedule": {"name": 3}})", "schedule.name"},
      {R"({"trainer": 3})", "trainer: expected an object"},
      {R"({"model": {"kind": "rnn"}})", "model.kind"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"trainer": )", "malformed JSON"},
  };
  for (const auto& c : cases) {
    const std::string path = write_file("bad.json", c.config);
    const CommandResult r = run("train --config '" + path + "'");
    EXPECT_EQ(r.exit_code, 2) << c.config << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.config << "\n" << r.err;
    EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  }
}

TEST(TrainLoop, EvaluationCosineCheckpointsAndLogResumeBitwise) {
  namespace fs = std::filesystem;
  const std::string dir = tmp_dir() + "/loop";
  fs::remove_all(dir);
  const std::string base = kPipelined + " --eval-every 3 --checkpoint-every 3 --keep-checkpoints 2 --decay-steps 6";
  const nlohmann::json whole =
      run_json(base + " --checkpoint-dir '" + dir + "/a' --metrics-log '" + dir + "/a.jsonl'");
  ASSERT_EQ(whole.at("evaluations").size(), 3u);  // steps 3, 6 and the last (8)
  EXPECT_EQ(whole.at("evaluations")[2].at("step"), 8);
  EXPECT_GT(whole.at("evaluations")[2].at("accuracy").get<double>(), 0.0);
  EXPECT_EQ(whole.at("lr_schedule").at("kind"), "cosine");

  // Half the run, then a resume from the folder (its newest checkpoint: step 3's).
  const std::string half = base;
  run_json(std::string(half).replace(half.find("--steps 8"), 9, "--steps 4") + " --checkpoint-dir '" + dir +
           "/b' --metrics-log '" + dir + "/b.jsonl'");
  // Step 4 was the last of that run, so it saved step 4; drop it to resume from step 3 as a killed
  // run would.
  fs::remove(dir + "/b/step-00000004.pfckpt");
  const nlohmann::json rest = run_json(std::string(base).replace(base.find("--steps 8"), 9, "--steps 5") +
                                       " --checkpoint-dir '" + dir + "/b' --metrics-log '" + dir +
                                       "/b.jsonl' --resume '" + dir + "/b'");
  EXPECT_EQ(rest.at("resumed_from_step"), 3);
  EXPECT_EQ(rest.at("resumed_from"), dir + "/b/step-00000003.pfckpt");
  EXPECT_EQ(rest.at("param_checksum"), whole.at("param_checksum"));
  EXPECT_EQ(rest.at("loss"), whole.at("loss"));

  auto lines = [](const std::string& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line);
      for (const char* timing : {"seconds", "tokens_per_s", "bubble_rate"}) j.erase(timing);
      out.push_back(j);
    }
    return out;
  };
  EXPECT_EQ(lines(dir + "/b.jsonl"), lines(dir + "/a.jsonl"));
  EXPECT_EQ(lines(dir + "/a.jsonl").size(), 8u);
  int kept = 0;
  for (const auto& e : fs::directory_iterator(dir + "/a")) kept += e.path().extension() == ".pfckpt" ? 1 : 0;
  EXPECT_EQ(kept, 2);
}

TEST(TrainLoop, OptionsThatCannotWorkTogetherSaySo) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"train --model mlp --eval-batches 3", "--eval-batches and --held-out need --eval-every"},
      {"train --model mlp --checkpoint-every 3", "needs --checkpoint-dir"},
      {"train --model mlp --decay-steps 3", "--lr-schedule cosine or linear"},
      {"train --model mlp --schedule pipedream --stages 2 --microbatches 2 --batch-size 4 --eval-every 2",
       "--eval-every: evaluation is not supported with asynchronous schedule 'pipedream'"},
      {"train --model mlp --schedule pipedream --stages 2 --microbatches 2 --batch-size 4 --lr-schedule cosine",
       "learning-rate schedule 'cosine'"},
      {"train --model mlp --lr-schedule cosin", "--lr-schedule"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
