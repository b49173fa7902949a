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
  // The command line wins over the plan. (--overlap-steps=false: the plan may choose overlapping
  // steps from the measured times, and those refuse an activation policy.)
  const nlohmann::json overridden = run_json("train --plan " + dir +
                                             "/p.json --steps 1 --activation-policy recompute --overlap-steps=false --quiet");
  EXPECT_EQ(overridden["activation_policy"], "recompute");
  EXPECT_EQ(overridden["schedule"], choice["schedule"]);
}

TEST(PlanCli, SearchesSequenceParallelismAtTAndThePlanFileCarriesIt) {
  const std::string dir = tmp_dir();
  // T = 2 only, the sequential trainer: with and without sequence parallelism, the same predicted
  // time, the smaller memory first.
  const std::string options = "plan" + kModel + " --measure --devices 2 --tensor-parallel 2 --schedules sequential "
                              "--calibration-steps 0 --svg '' --top 100";
  const nlohmann::json plan = run_json(options + " --out " + dir + "/sp.json");
  int with = 0;
  for (const nlohmann::json& c : plan["candidates"]) {
    ASSERT_TRUE(c.contains("sequence_parallel") && c["sequence_parallel"].is_boolean()) << c.dump();
    with += c["sequence_parallel"].get<bool>() ? 1 : 0;
  }
  EXPECT_EQ(2 * with, static_cast<int>(plan["candidates"].size())) << plan.dump();
  EXPECT_EQ(plan["choice"]["sequence_parallel"], true) << plan.dump();
  EXPECT_EQ(plan["train_config"]["trainer"]["sequence_parallel"], true);
  EXPECT_EQ(plan["train_config"]["trainer"]["tensor_parallel"], 2);
  EXPECT_NE(plan["run_with"].get<std::string>().find("mpirun -np 2 "), std::string::npos) << plan["run_with"];
  const nlohmann::json file = nlohmann::json::parse(read_file(dir + "/sp.json"));
  EXPECT_EQ(file["train_config"], plan["train_config"]);
  const nlohmann::json without = run_json(options + " --no-sequence-parallel --out ''");
  for (const nlohmann::json& c : without["candidates"]) EXPECT_EQ(c["sequence_parallel"], false) << c.dump();
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

// `pipeforge predict`: the cluster model's step for a GPT configuration on GPUs this machine has
// not; the JSON the issue names, the text report, a user's GPU file, and bad input named.
namespace {

const std::string kPredict =
    "predict --gpu a100-80gb --gpus 512 --tensor-parallel 8 --stages 64 --global-batch 512 --micro-batch 1 "
    "--layers 128 --d-model 25600 --heads 160 --vocab 51200 --seq-len 2048 --precision fp16 --attention unfused";

TEST(PredictCli, PrintsTheStepFlopsAndMemoryOfAPublishedRun) {
  // Korthikanti et al.'s 1T run with selective recompute and sequence parallelism: 71.49 s.
  const nlohmann::json j = run_json(kPredict + " --recompute selective --sequence-parallel --json");
  EXPECT_NEAR(j.at("step_seconds").get<double>(), 71.49, 0.1 * 71.49) << j.dump();
  const double flops = 72.0 * 512 * 2048 * 128 * 25600.0 * 25600 * (1 + 2048 / (6 * 25600.0) + 51200 / (12 * 128 * 25600.0));
  EXPECT_NEAR(j.at("tflops_per_gpu").get<double>(), flops / (j.at("step_seconds").get<double>() * 512) / 1e12, 1e-6);
  EXPECT_GT(j.at("bubble_rate").get<double>(), 0.05);
  EXPECT_LT(j.at("bubble_rate").get<double>(), 0.2);
  EXPECT_GT(j.at("memory_per_gpu_bytes").get<double>(), 10e9);
  EXPECT_TRUE(j.at("fits").get<bool>());
  EXPECT_EQ(j.at("stage_costs").size(), 64u);
  // Full recompute: SC21's 96 x ... count, and slower.
  const nlohmann::json full = run_json(kPredict + " --recompute full --json");
  EXPECT_GT(full.at("step_seconds").get<double>(), j.at("step_seconds").get<double>());
  const CommandResult text = run(kPredict + " --recompute full");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("TFLOP/s"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("fits"), std::string::npos) << text.out;
}

// kPredict with one option's value replaced.
std::string predict_with(const std::string& option, const std::string& value) {
  std::string args = kPredict;
  const size_t begin = args.find(option + " ") + option.size() + 1;
  const size_t end = args.find(' ', begin);
  return args.replace(begin, end - begin, value);
}

TEST(PredictCli, TakesAGpuFileAndNamesBadInput) {
  const std::string dir = tmp_dir();
  // A preset's JSON with twice the bandwidth between nodes: a data-parallel step gets faster.
  const std::string base =
      "predict --gpus 16 --data-parallel 16 --global-batch 64 --micro-batch 2 --layers 12 --d-model 768 --heads 12 "
      "--vocab 50257 --seq-len 1024 --json --gpu ";
  const nlohmann::json h100 = run_json(base + "h100-sxm");
  EXPECT_EQ(run_json(base + "h100-sxm"), h100);  // deterministic
  write_file(dir + "/fast.json",
             R"({"name": "fast", "gpu": {"peak_tflops": {"bf16": 989.4}, "sms": 132, "memory_mib": 81559,
                 "memory_gb_per_s": 3350, "gemm_efficiency": 0.72, "gemm_k_overhead": 256,
                 "flash_attention_efficiency": 0.5, "memory_efficiency": 0.85, "kernel_overhead_us": 4},
                 "node": {"gpus": 8, "nvlink_gb_per_s": 450, "nvlink_efficiency": 0.8, "nvlink_latency_us": 2},
                 "network": {"gb_per_s_per_gpu": 100, "efficiency": 0.9, "latency_us": 5}, "reserved_mib": 2048})");
  const nlohmann::json fast = run_json(base + dir + "/fast.json");
  EXPECT_LT(fast.at("data_parallel_seconds").get<double>(), h100.at("data_parallel_seconds").get<double>());
  EXPECT_DOUBLE_EQ(fast.at("pipeline_seconds").get<double>(), h100.at("pipeline_seconds").get<double>());

  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {predict_with("--gpus", "256"), "--gpus 256 is not --tensor-parallel x --stages x --data-parallel = 8 x 64 x 1 = 512"},
      {predict_with("--heads", "100"), "--heads 100 is not divisible by --tensor-parallel 8"},
      {predict_with("--gpu", "h100"), "unknown GPU 'h100'"},
      {predict_with("--micro-batch", "3"), "--global-batch 512 is not a multiple of --micro-batch x --data-parallel = 3 x 1"},
      {kPredict + " --recompute some", "--recompute"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  write_file(dir + "/bad.json", R"({"name": "bad", "gpu": {}})");
  const CommandResult bad = run(base + dir + "/bad.json");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.json: gpu.peak_tflops: required field is missing"), std::string::npos) << bad.err;
}

}  // namespace

// `plan --cluster FILE` with a GPU cluster: the cluster model's ranked search, its size and time,
// the chart; the CPU planner's cluster files keep their meaning.
namespace {

TEST(PlanGpuClusterCli, RanksConfigurationsOfAGpuCluster) {
  const std::string dir = tmp_dir();
  write_file(dir + "/gpus.json", R"({"gpu": "h100-sxm", "nodes": 4})");
  const std::string args = "plan --cluster " + dir + "/gpus.json --layers 24 --d-model 2048 --heads 16 --seq-len 2048 "
                           "--batch-size 128 --top 5 --svg " + dir + "/gpus.svg";
  const CommandResult text = run(args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("32 x h100-sxm (4 nodes)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("search: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("pruned by their lower bound"), std::string::npos) << text.out;
  EXPECT_NE(read_file(dir + "/gpus.svg").find("choice: "), std::string::npos);
  const nlohmann::json j = run_json(args + " --json");
  ASSERT_EQ(j.at("ranked").size(), 5u) << j.dump();
  const nlohmann::json& best = j.at("ranked")[0];
  EXPECT_EQ(best.at("gpus"), 32);
  EXPECT_EQ(best.at("tensor_parallel").get<int>() * best.at("stages").get<int>() * best.at("data_parallel").get<int>(), 32);
  EXPECT_LE(best.at("step_seconds").get<double>(), j.at("ranked")[4].at("step_seconds").get<double>());
  EXPECT_GT(j.at("search").at("candidates").get<int>(), j.at("search").at("simulated").get<int>());
  // The best row is what `predict` says of that configuration.
  const nlohmann::json again = run_json(
      "predict --gpu h100-sxm --layers 24 --d-model 2048 --heads 16 --seq-len 2048 --vocab 51200 --global-batch 128"
      " --gpus 32 --tensor-parallel " + std::to_string(best.at("tensor_parallel").get<int>()) +
      " --stages " + std::to_string(best.at("stages").get<int>()) +
      " --data-parallel " + std::to_string(best.at("data_parallel").get<int>()) +
      " --chunks " + std::to_string(best.at("chunks").get<int>()) + " --schedule " + best.at("schedule").get<std::string>() +
      " --micro-batch " + std::to_string(best.at("micro_batch").get<int>()) + " --recompute " +
      best.at("recompute").get<std::string>() + (best.at("sequence_parallel").get<bool>() ? " --sequence-parallel" : "") +
      " --json");
  EXPECT_DOUBLE_EQ(again.at("step_seconds").get<double>(), best.at("step_seconds").get<double>());
  // No --layers: named.
  write_file(dir + "/bad.json", R"({"gpu": "h100-sxm", "nodes": 0})");
  const CommandResult bad = run("plan --cluster " + dir + "/bad.json --layers 4 --batch-size 8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.json: nodes"), std::string::npos) << bad.err;
  // --chakra: the choice's traces, one per GPU.
  const nlohmann::json traced = run_json(args + " --json --chakra " + dir + "/traces");
  EXPECT_EQ(traced.at("chakra").at("files"), 32) << traced.dump();
  EXPECT_TRUE(std::ifstream(dir + "/traces/pipeforge.31.et").good());
  EXPECT_FALSE(std::ifstream(dir + "/traces/pipeforge.32.et").good());
  write_file(dir + "/cpu.json", R"({"nodes": 1, "devices_per_node": 2, "device": {"kind": "cpu", "memory_gib": 8},
      "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}, "inter_node": {"bandwidth_gb_per_s": 1, "latency_us": 50}})");
  const CommandResult cpu = run("plan --cluster " + dir + "/cpu.json --batch-size 8 --chakra " + dir + "/t2");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("--chakra applies to a GPU cluster file"), std::string::npos) << cpu.err;
}

}  // namespace
