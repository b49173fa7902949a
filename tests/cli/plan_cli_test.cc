// `pipeforge plan`: the ranked table, plan.json and the chart; `train --plan` running the choice;
// the same profile giving the same plan; bad input named.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_shell;
using pftest::run_json;
using pftest::tmp_dir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

const std::string kModel = " --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 2 --batch-size 8 --quiet";

TEST(PlanCli, PrintsTheRankedTableAndWritesThePlanAndTheChart) {
  const std::string dir = tmp_dir();
  const CommandResult r =
      run("plan" + kModel + " --measure --out " + dir + "/plan.json --svg " + dir + "/plan.svg --top 5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("schedule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train as it says with:\n  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipeforge train --plan " + dir + "/plan.json"), std::string::npos) << r.out;
  const nlohmann::json plan = nlohmann::json::parse(read_file(dir + "/plan.json"));
  EXPECT_EQ(plan["format"], "pipeforge.plan/1");
  ASSERT_TRUE(plan.contains("choice"));
  EXPECT_EQ(plan["choice"], plan["candidates"][0]);
  EXPECT_LE(plan["candidates"].size(), 5u);
  for (size_t i = 1; i < plan["candidates"].size(); ++i)
    EXPECT_LE(plan["candidates"][i - 1]["step_seconds"].get<double>(), plan["candidates"][i]["step_seconds"].get<double>());
  const std::string svg = read_file(dir + "/plan.svg");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("Pareto front"), std::string::npos);
}

TEST(PlanCli, TrainRunsThePlansChoice) {
  const std::string dir = tmp_dir();
  // One replica, so that the choice runs in this process (data parallelism needs mpirun).
  const nlohmann::json plan = run_json("plan" + kModel + " --measure --data-parallel 1 --ranks 2 "
                                       "--out " + dir + "/p.json --svg ''");
  const nlohmann::json choice = plan["choice"];
  EXPECT_EQ(choice["data_parallel"], 1);
  EXPECT_EQ(choice["ranks"], 2);
  const nlohmann::json trained = run_json("train --plan " + dir + "/p.json --steps 2 --quiet");
  // Predicted against measured.
  EXPECT_EQ(trained["plan_step_seconds"]["predicted"], choice["step_seconds"]) << trained.dump();
  EXPECT_GT(trained["plan_step_seconds"]["measured"].get<double>(), 0.0) << trained.dump();
  // The line the plan prints to run next runs as printed (one process: no mpirun in it).
  const std::string line = plan["run_with"];
  EXPECT_EQ(line.find("mpirun"), std::string::npos) << line;
  const CommandResult printed = run_shell(line);
  ASSERT_EQ(printed.exit_code, 0) << line << "\n" << printed.err;
  EXPECT_NE(printed.out.find("step time: measured "), std::string::npos) << printed.out;
  EXPECT_NE(printed.out.find(", the plan predicted "), std::string::npos) << printed.out;
  EXPECT_EQ(trained["schedule"], choice["schedule"]);
  EXPECT_EQ(trained["stages"], choice["ranks"]);
  EXPECT_EQ(trained["micro_batches"], choice["micro_batches"]);
  // The plan names one pipeline's stages; the run reports every stage (two copies for bitpipe).
  const nlohmann::json stages = trained["partition"]["layers_per_stage"];
  ASSERT_GE(stages.size(), choice["layers_per_stage"].size());
  for (size_t i = 0; i < choice["layers_per_stage"].size(); ++i) EXPECT_EQ(stages[i], choice["layers_per_stage"][i]);
  // The command line wins over the plan.
  const nlohmann::json overridden =
      run_json("train --plan " + dir + "/p.json --steps 1 --activation-policy recompute --quiet");
  EXPECT_EQ(overridden["activation_policy"], "recompute");
  EXPECT_EQ(overridden["schedule"], choice["schedule"]);
}

TEST(PlanCli, TheSameProfileGivesTheSamePlan) {
  const std::string dir = tmp_dir();
  const CommandResult first = run("plan" + kModel + " --measure --devices 2 --save-profile " + dir +
                                  "/profile.json --out '' --svg '' --json --top 1000");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  write_file(dir + "/cluster.json", nlohmann::json::parse(first.out)["cluster"].dump());
  const nlohmann::json a = run_json("plan" + kModel + " --cluster " + dir + "/cluster.json --profile " + dir +
                                    "/profile.json --out '' --svg '' --top 1000");
  const nlohmann::json b = run_json("plan" + kModel + " --cluster " + dir + "/cluster.json --profile " + dir +
                                    "/profile.json --out '' --svg '' --top 1000");
  EXPECT_EQ(a["candidates"], b["candidates"]);
  EXPECT_GT(a["candidates"].size(), 10u);
}

TEST(PlanCli, NamesBadInput) {
  const std::string dir = tmp_dir();
  CommandResult r = run("plan" + kModel);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--cluster FILE or --measure"), std::string::npos) << r.err;

  write_file(dir + "/bad.json", R"({"devices_per_node": 2, "device": {"kind": "tpu", "memory_gib": 8},
    "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}})");
  r = run("plan" + kModel + " --cluster " + dir + "/bad.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(dir + "/bad.json: device.kind: unknown device kind 'tpu'"), std::string::npos) << r.err;

  write_file(dir + "/bad.json", R"({"devices_per_node": 2, "device": {"kind": "cpu", "memory_gib": 8},
    "intra_node": {"bandwidth_gbps": 10, "latency_us": 5}})");
  r = run("plan" + kModel + " --cluster " + dir + "/bad.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("intra_node.bandwidth_gb_per_s: missing"), std::string::npos) << r.err;

  r = run("plan" + kModel + " --measure --memory-limit-gib 0.00001 --out '' --svg ''");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no candidate fits"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the smallest that works"), std::string::npos) << r.err;

  write_file(dir + "/not_a_plan.json", R"({"format": "pipeforge.profile/1"})");
  r = run("train --plan " + dir + "/not_a_plan.json --steps 1 --quiet");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a plan of `pipeforge plan`"), std::string::npos) << r.err;

  r = run("plan" + kModel + " --measure --schedules pipedream --out '' --svg ''");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("schedules: 'pipedream'"), std::string::npos) << r.err;
}

}  // namespace
