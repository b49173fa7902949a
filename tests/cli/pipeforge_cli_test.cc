// End-to-end tests of `pipeforge train`: the binary is run through the shell on tiny models and its
// --json output, stderr and exit code are checked.
#include <algorithm>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "c_api/pipeforge.h"
#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::tmp_dir;

const char* kTinyGpt =
    "train --model gpt --steps 12 --batch-size 4 --seq-len 16 --d-model 16 --heads 2 --layers 1 --lr 0.01";
const char* kTinyMlp =
    "train --model mlp --steps 30 --batch-size 16 --microbatches 2 --features 8 --hidden 16";

void expect_training_worked(const nlohmann::json& j, const std::string& model, int64_t steps) {
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.at("model"), model);
  EXPECT_EQ(j.at("steps"), steps);
  ASSERT_TRUE(j.at("loss").is_number()) << j.dump();  // null when not finite
  ASSERT_TRUE(j.at("first_loss").is_number()) << j.dump();
  const double loss = j.at("loss"), first = j.at("first_loss");
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(loss, first) << "loss did not fall: " << j.at("losses").dump();
  EXPECT_EQ(j.at("losses").size(), static_cast<size_t>(steps));
  EXPECT_GT(j.at("tokens_per_s").get<double>(), 0.0);
  EXPECT_GT(j.at("num_parameters").get<int64_t>(), 0);
  const std::string checksum = j.at("param_checksum");
  EXPECT_EQ(checksum.size(), 64u);
  EXPECT_EQ(checksum.find_first_not_of("0123456789abcdef"), std::string::npos) << checksum;
}

TEST(PipeforgeCli, TinyGptTrainsAndIsReproducible) {
  const nlohmann::json a = run_json(std::string(kTinyGpt) + " --seed 1");
  expect_training_worked(a, "gpt", 12);
  EXPECT_EQ(a.at("tokens").get<int64_t>(), 12 * 4 * 16);
  EXPECT_GT(a.at("config").at("vocab").get<int64_t>(), 40);

  const nlohmann::json again = run_json(std::string(kTinyGpt) + " --seed 1");
  EXPECT_EQ(again.at("param_checksum"), a.at("param_checksum"));
  EXPECT_EQ(again.at("losses"), a.at("losses"));

  const nlohmann::json other = run_json(std::string(kTinyGpt) + " --seed 2");
  EXPECT_NE(other.at("param_checksum"), a.at("param_checksum"));
}

TEST(PipeforgeCli, TinyMlpTrainsAndIsReproducible) {
  const nlohmann::json a =
      run_json(std::string(kTinyMlp) + " --seed 5 --optimizer sgd --momentum 0.9 --lr 0.1");
  expect_training_worked(a, "mlp", 30);
  const nlohmann::json again =
      run_json(std::string(kTinyMlp) + " --seed 5 --optimizer sgd --momentum 0.9 --lr 0.1");
  EXPECT_EQ(again.at("param_checksum"), a.at("param_checksum"));
  const nlohmann::json other =
      run_json(std::string(kTinyMlp) + " --seed 6 --optimizer sgd --momentum 0.9 --lr 0.1");
  EXPECT_NE(other.at("param_checksum"), a.at("param_checksum"));
}

TEST(PipeforgeCli, CheckpointAndResumeEqualsOneRun) {
  const std::string ckpt = tmp_dir() + "/half.ckpt";
  const std::string base = "train --model mlp --batch-size 8 --features 8 --hidden 16 --seed 3 --quiet";
  const nlohmann::json whole = run_json(base + " --steps 10");
  const nlohmann::json first = run_json(base + " --steps 4 --checkpoint '" + ckpt + "'");
  EXPECT_EQ(first.at("checkpoint"), ckpt);
  const nlohmann::json rest = run_json(base + " --steps 6 --resume '" + ckpt + "'");
  EXPECT_EQ(rest.at("steps"), 10);
  EXPECT_EQ(rest.at("resumed_from_step"), 4);
  EXPECT_EQ(rest.at("param_checksum"), whole.at("param_checksum"));
  EXPECT_EQ(rest.at("loss"), whole.at("loss"));
}

// Checkpoints carry the run (issue 43 item 8): `--resume` alone restores the model, the data and
// the trainer's options (it was a shape error naming no flag), bitwise as the run that never
// stopped; model options that describe another model are named in the error, with the way out.
TEST(PipeforgeCli, ResumeAloneRestoresTheRunAndAMismatchNamesTheOptions) {
  const pftest::TempFolder dir("resume_alone");
  const std::string ckpt = dir.path + "/run.ckpt";
  const std::string args = "train --model gpt --d-model 32 --heads 2 --layers 2 --seq-len 16 --batch-size 4 --seed 5 "
                           "--lr 0.003 --optimizer sgd --momentum 0.5 --quiet";
  const nlohmann::json straight = run_json(args + " --steps 5");
  run_json(args + " --steps 3 --checkpoint '" + ckpt + "'");
  const nlohmann::json resumed = run_json("train --quiet --steps 2 --resume '" + ckpt + "'");
  EXPECT_EQ(resumed["param_checksum"], straight["param_checksum"]);
  EXPECT_EQ(resumed["losses"][1], straight["losses"][4]);
  EXPECT_EQ(resumed["seed"], 5);
  EXPECT_EQ(resumed["optimizer"]["kind"], "sgd");
  // The command line wins over the checkpoint: another learning rate for the rest of the run.
  EXPECT_NEAR(run_json("train --quiet --steps 1 --lr 0.001 --resume '" + ckpt + "'")["last_lr"].get<double>(), 0.001,
              1e-9);
  const CommandResult other = run("train --quiet --steps 1 --d-model 64 --resume '" + ckpt + "'");
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("The model options given (--d-model) describe another model than the checkpoint's; "
                           "leave them out"),
            std::string::npos)
      << other.err;
}

TEST(PipeforgeCli, GptOnAGivenTextFile) {
  const std::string path = tmp_dir() + "/text.txt";
  {
    std::ofstream out(path);
    for (int i = 0; i < 50; ++i) out << "the quick brown fox jumps over the lazy dog\n";
  }
  const nlohmann::json j = run_json(std::string(kTinyGpt) + " --data '" + path + "'");
  expect_training_worked(j, "gpt", 12);
  EXPECT_EQ(j.at("config").at("vocab"), 28);  // 26 letters, space, newline
  EXPECT_EQ(j.at("config").at("data_files"), nlohmann::json::array({path}));
}

TEST(PipeforgeCli, ProgressGoesToStderrAndHumanOutputToStdout) {
  const CommandResult r = run(std::string(kTinyMlp));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step 30/30"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("final loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameter checksum"), std::string::npos) << r.out;
}

TEST(PipeforgeCli, BadOptionsExitWithTwoAndSayWhy) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"train --model transformer", "--model"},
      {"train --steps 0", "--steps"},
      {"train --optimizer lamb", "--optimizer"},
      {"train --no-such-option", "--no-such-option"},
      {"train --batch-size 6 --microbatches 4", "--microbatches"},
      {"train --d-model 30 --heads 4", "--heads"},
      {"train --data /no/such/file.txt", "/no/such/file.txt"},
      {"train --model mlp --data /etc/hostname", "--data"},
      {"train --resume /no/such/checkpoint", "/no/such/checkpoint"},
      {"train --devices gpu0", "gpu0"},
      {"train --devices cuda:0,cuda:1", "one device"},
      {"train --schedule 1f1b --stages 2 --microbatches 2 --devices cuda:0,cuda:0,cuda:0", "rank"},
      {"", "subcommand"},
      {"trian", "unknown command 'trian'; did you mean 'train'?"},
      {"train --stepz 3", "; did you mean '--steps'?"},
      {"train --stages 2", "--stages 2 needs a schedule"},
      {"train --chunks 2", "--chunks 2 needs a schedule"},
      {"train --seq-slices 2", "--seq-slices is 2: it needs a pipelined schedule that slices sequences"},
      // Numbers: a word is "not a number" (CLI11 printed its range's 309-digit bound), a bad sign
      // says the bound.
      {"train --lr abc", "--lr: 'abc' is not a finite number"},
      {"train --lr -1", "--lr: must be > 0, got -1"},
      {"train --lr nan", "--lr: 'nan' is not a finite number"},
      {"simulate --schedule 1f1b --stages 2 --microbatches 4 --t-f x", "--t-f: 'x' is not a finite number"},
  };
  for (const auto& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << "\nstdout: " << r.out;
    EXPECT_LT(r.err.size(), 400u) << c.args << "\nstderr: " << r.err;
  }
  // A hidden command (measure-processes, which `plan --measure` runs) is never listed or suggested.
  const CommandResult unknown = run("measure");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err.find("measure-processes"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("(commands: train, eval, export, schedule, simulate, compare, plan, predict, glm, sweep)"), std::string::npos) << unknown.err;
}

// Lists take blanks after their commas, as people type them.
TEST(PipeforgeCli, ListsTakeBlanksAfterCommas) {
  const CommandResult r = run("compare --schedules \"1f1b, zb-h1\" --stages 2 --microbatches 4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("zb-h1"), std::string::npos) << r.out;
}

TEST(PipeforgeCli, VersionIsTheLibrarys) {
  const CommandResult r = run("--version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, std::string("pipeforge ") + PF_VERSION_STRING + "\n");
}

TEST(PipeforgeCli, AMistypedScheduleGetsTheClosestName) {
  const CommandResult r = run("train --schedule zbv --stages 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown schedule 'zbv'; did you mean 'zb-v'?"), std::string::npos) << r.err;
}

// One default for each setting (issue 43 item 9). Chunks: a looped schedule interleaves 2 chunks
// per rank unless told otherwise, in train as in compare (train used 1, compare 2). Micro-batches:
// a pipelined run splits --batch-size into up to 2 x --stages micro-batches, so that the ranks
// overlap (1, the old default, ran them one after another); without a schedule, 1.
TEST(PipeforgeCli, DefaultsAgreeAcrossCommandsAndOverlapTheRanks) {
  const std::string tiny = "train --model gpt --steps 1 --seq-len 8 --d-model 16 --heads 2 --quiet";  // batch 8
  const nlohmann::json looped = run_json(tiny + " --layers 4 --schedule interleaved-1f1b --stages 2");
  EXPECT_EQ(looped["partition"]["layers_per_stage"].size(), 4u) << "2 ranks x 2 chunks: " << looped["partition"].dump();
  EXPECT_EQ(looped["micro_batches"], 4);
  EXPECT_EQ(run_json(tiny + " --schedule 1f1b --stages 4 --layers 4")["micro_batches"], 8);
  EXPECT_EQ(run_json(tiny + " --schedule 1f1b --stages 2 --batch-size 6")["micro_batches"], 3);  // divides 6
  EXPECT_EQ(run_json(tiny)["micro_batches"], 1);
  EXPECT_EQ(run_json(tiny + " --schedule 1f1b --stages 2 --microbatches 2")["micro_batches"], 2);  // given: kept
  // The printed config holds the resolved value, and runs as printed.
  const CommandResult printed = run(tiny + " --schedule 1f1b --stages 2 --print-config");
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(nlohmann::json::parse(printed.out)["trainer"]["micro_batches"], 4) << printed.out;
  const CommandResult compared = run("compare --schedules interleaved-1f1b --stages 2 --microbatches 4 --json");
  ASSERT_EQ(compared.exit_code, 0) << compared.err;
  EXPECT_NE(compared.out.find("\"chunks\":2"), std::string::npos) << compared.out;
}

// The headline bubble rate is the busiest rank's idle share; every rank's own is reported, and a
// partition that leaves one rank idle most of the step while another works is warned about, with
// what to change (issue 43 item 7: zb-v on the default GPT, rank 0 holding no block, idle 77%).
TEST(PipeforgeCli, PerRankIdleSharesAndTheLopsidedPartitionWarning) {
  const CommandResult r = run("train --model gpt --schedule zb-v --stages 2 --steps 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["ranks"].size(), 2u) << j.dump();
  double lowest = 1, highest = 0;
  for (const auto& rank : j["ranks"]) {
    const double share = rank["idle_share"];
    EXPECT_GE(share, 0.0);
    EXPECT_LE(share, 1.0);
    EXPECT_GT(rank["busy_seconds"].get<double>(), 0.0);
    EXPECT_GE(rank["idle_seconds"].get<double>(), 0.0);
    lowest = std::min(lowest, share);
    highest = std::max(highest, share);
  }
  // The headline: the mean over the steps of the busiest rank's share, so at most the mean of any
  // rank's own (the shares are means over the steps too, not ratios of sums, which a long step
  // would weigh more).
  EXPECT_LE(j["bubble_rate"].get<double>(), lowest + 1e-9) << j.dump();
  EXPECT_NE(j["bubble_rate_measures"].get<std::string>().find("busiest rank"), std::string::npos);
  const bool lopsided = highest >= 0.5 && lowest <= 0.25;
  EXPECT_EQ(r.err.find("warning: rank ") != std::string::npos, lopsided)
      << "idle shares " << lowest << " .. " << highest << "; stderr: " << r.err;
  if (lopsided) EXPECT_NE(r.err.find("To spread the work: more --layers"), std::string::npos) << r.err;
  // The summary shows every rank's share too.
  const CommandResult text = run("train --model gpt --schedule 1f1b --stages 2 --steps 2 --quiet");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("idle share of the step per rank: 0: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("(the busiest rank's idle share, mean over the steps)"), std::string::npos) << text.out;
}

// `train --help` lists its options by topic (issue 43 item 12: ~150 ungrouped lines): every option
// but --help under a heading.
TEST(PipeforgeCli, TrainHelpIsGroupedByTopic) {
  const CommandResult r = run("train --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t last = 0;
  for (const char* heading : {"Config, plan and information:", "Model and data:", "Training:", "Pipeline:",
                              "Checkpoints and logs:", "Output:"}) {
    const size_t at = r.out.find(std::string("\n") + heading + "\n");
    EXPECT_NE(at, std::string::npos) << heading << " missing:\n" << r.out;
    if (at != std::string::npos) last = std::max(last, at);
  }
  // The ungrouped section holds --help alone.
  const size_t options = r.out.find("Options:\n");
  ASSERT_NE(options, std::string::npos) << r.out;
  const std::string ungrouped = r.out.substr(options, r.out.find("\n\n", options) - options);
  EXPECT_EQ(ungrouped.find("--", ungrouped.find("--help") + 6), std::string::npos) << ungrouped;
}

// --devices cpu is the default path; cuda:0 trains on the GPU or, without one, is refused naming it.
TEST(PipeforgeCli, DevicesOption) {
  const std::string args = "train --model mlp --steps 3 --microbatches 2 --quiet";
  const auto plain = run_json(args);
  EXPECT_EQ(run_json(args + " --devices cpu")["param_checksum"], plain["param_checksum"]);
  EXPECT_EQ(run_json(args + " --devices cpu --schedule 1f1b --stages 2")["param_checksum"], plain["param_checksum"]);
  const CommandResult gpu = run(args + " --devices cuda:0 --json");
  if (gpu.exit_code == 2) {
    EXPECT_NE(gpu.err.find("cuda:0 is not available"), std::string::npos) << gpu.err;
  } else {
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    const auto j = nlohmann::json::parse(gpu.out);
    EXPECT_NEAR(j["loss"].get<double>(), plain["loss"].get<double>(), 1e-4 * std::abs(plain["loss"].get<double>()));
  }
}

TEST(PipeforgeCli, CorruptCheckpointIsAUsageError) {
  const std::string path = tmp_dir() + "/corrupt.ckpt";
  { std::ofstream(path) << "not a checkpoint"; }
  const CommandResult r = run("train --model mlp --steps 1 --resume '" + path + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
}

}  // namespace

namespace {

// --seq-slices: seq1f1b trains the GPT on sequence slices, to within float rounding of 1f1b, with
// less activation memory on the first rank.
TEST(PipeforgeTrain, SequenceSlices) {
  const std::string base =
      "train --model gpt --steps 2 --batch-size 8 --microbatches 4 --seq-len 16 --d-model 16 --heads 2 "
      "--layers 2 --lr 0.01 --stages 2";
  const auto whole = run_json(base + " --schedule 1f1b");
  const auto sliced = run_json(base + " --schedule seq1f1b --seq-slices 4");
  EXPECT_EQ(sliced.at("schedule"), "seq1f1b");
  EXPECT_NEAR(sliced.at("loss").get<double>(), whole.at("loss").get<double>(), 1e-5);
  EXPECT_LT(sliced.at("peak_activation_bytes")[0].get<double>(), whole.at("peak_activation_bytes")[0].get<double>());
  const CommandResult bad = run(base + " --schedule seq1f1b --seq-slices 3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--seq-slices 3 must divide the model's seq_len 16"), std::string::npos) << bad.err;
}

TEST(PipeforgeTrain, PipelinedScheduleGivesTheSequentialChecksumAndMeasurements) {
  const std::string base =
      "train --model gpt --steps 4 --batch-size 8 --microbatches 4 --seq-len 16 --d-model 16 --heads 2 "
      "--layers 2 --lr 0.01";
  const auto sequential = run_json(base);
  EXPECT_EQ(sequential.at("schedule"), "sequential");
  EXPECT_EQ(sequential.at("peak_activation_bytes").size(), 1u);
  for (const char* schedule : {"1f1b", "zb-h1", "zb-v", "gpipe"}) {
    const std::string trace = tmp_dir() + "/" + schedule + ".trace.json";
    const auto pipelined = run_json(base + " --schedule " + schedule + " --stages 2 --trace " + trace);
    EXPECT_EQ(pipelined.at("param_checksum"), sequential.at("param_checksum")) << schedule;
    EXPECT_EQ(pipelined.at("loss"), sequential.at("loss")) << schedule;
    EXPECT_EQ(pipelined.at("schedule"), schedule);
    ASSERT_EQ(pipelined.at("peak_activation_bytes").size(), 2u) << schedule;
    EXPECT_GT(pipelined.at("peak_activation_bytes")[0].get<double>(), 0.0);
    const double bubble = pipelined.at("bubble_rate").get<double>();
    EXPECT_GT(bubble, 0.0);
    EXPECT_LT(bubble, 1.0);
    std::ifstream in(trace);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_TRUE(nlohmann::json::parse(text.str()).contains("traceEvents")) << schedule;
  }
  const auto balanced = run_json(base + " --schedule interleaved-1f1b --stages 2 --chunks 2 --partition balanced");
  EXPECT_EQ(balanced.at("param_checksum"), sequential.at("param_checksum"));
  for (const char* policy : {"recompute", "offload-host", "offload-file"}) {
    const auto offloaded = run_json(base + " --schedule 1f1b --stages 2 --activation-policy " + policy +
                                    " --offload-dir " + tmp_dir() + "/offload");
    EXPECT_EQ(offloaded.at("param_checksum"), sequential.at("param_checksum")) << policy;
    EXPECT_EQ(offloaded.at("activation_policy"), policy);
    EXPECT_TRUE(offloaded.contains("offloaded_bytes_per_step")) << policy;
  }
  const auto bad = run(base + " --schedule 2f2b --stages 2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("2f2b"), std::string::npos) << bad.err;
}

// The default partition balances parameter counts: 8 blocks + embedding + ln_f + head on 2 ranks
// put 4 blocks on each (5 + 6 layers), on the V schedule's 4 stages 2 blocks each (3 + 2 + 2 + 4,
// so 4 per rank); --partition even counts layers (6 + 5: 5 blocks and 3). The same checksum.
TEST(PipeforgeTrain, DefaultPartitionBalancesParametersEvenCountsLayers) {
  const std::string base =
      "train --model gpt --steps 2 --batch-size 8 --microbatches 4 --seq-len 16 --d-model 16 --heads 2 --layers 8";
  const auto sequential = run_json(base);
  const auto counts = [](const nlohmann::json& out) {
    return out.at("partition").at("layers_per_stage").get<std::vector<int>>();
  };
  const auto params = run_json(base + " --schedule 1f1b --stages 2");
  EXPECT_EQ(counts(params), (std::vector<int>{5, 6}));
  EXPECT_EQ(params.at("param_checksum"), sequential.at("param_checksum"));
  const auto v_shape = run_json(base + " --schedule zb-v --stages 2");
  EXPECT_EQ(counts(v_shape), (std::vector<int>{3, 2, 2, 4}));
  EXPECT_EQ(v_shape.at("param_checksum"), sequential.at("param_checksum"));
  const auto even = run_json(base + " --schedule 1f1b --stages 2 --partition even");
  EXPECT_EQ(counts(even), (std::vector<int>{6, 5}));
  EXPECT_EQ(even.at("param_checksum"), sequential.at("param_checksum"));
  const auto given = run_json(base + " --schedule 1f1b --stages 2 --layers-per-stage 2 9");
  EXPECT_EQ(counts(given), (std::vector<int>{2, 9}));
}

TEST(PipeforgeTrain, AsynchronousSchedulesTrainDrainAndRefuseWhatTheyCannotDo) {
  const std::string base =
      "train --model gpt --steps 4 --batch-size 8 --microbatches 4 --seq-len 16 --d-model 16 --heads 2 "
      "--layers 2 --lr 0.01 --stages 2";
  const auto flush = run_json(base + " --schedule 1f1b");
  const auto a = run_json(base + " --schedule pipedream");
  const auto b = run_json(base + " --schedule pipedream");
  EXPECT_EQ(a.at("asynchronous"), true);
  EXPECT_EQ(a.at("param_checksum"), b.at("param_checksum"));      // reproducible
  EXPECT_NE(a.at("param_checksum"), flush.at("param_checksum"));  // stale weights: another result
  EXPECT_EQ(a.at("peak_weight_versions"), nlohmann::json({2, 1}));  // p - s versions on rank s
  // The run drains before it saves: resuming continues from the drained pipeline.
  const std::string ckpt = tmp_dir() + "/pipedream.ckpt";
  const auto saved = run_json(base + " --schedule pipedream --checkpoint " + ckpt);
  EXPECT_EQ(saved.at("param_checksum"), a.at("param_checksum"));
  std::string two_more = base;
  two_more.replace(two_more.find("--steps 4"), 9, "--steps 2");
  const auto resumed = run_json(two_more + " --schedule pipedream --resume " + ckpt);
  EXPECT_EQ(resumed.at("steps"), 6);
  const auto vs = run_json(base + " --schedule pipedream --vertical-sync");
  EXPECT_EQ(vs.at("peak_weight_versions"), nlohmann::json({2, 2}));
  const auto text = run(base + " --schedule spectrain --optimizer sgd --momentum 0.9 --spectrain-version 2");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("no flush between steps"), std::string::npos) << text.out;
  struct Refusal {
    std::string args, says;
  };
  for (const Refusal& r : std::vector<Refusal>{
           {" --schedule pipemare --vertical-sync", "pipedream only, not to 'pipemare'"},
           {" --schedule 1f1b --pipemare-decay 0.5", "pipemare only, not to '1f1b'"},
           {" --schedule spectrain", "spectrain predicts weights from SGD's momentum"},
           {" --schedule pipedream --activation-policy offload-host", "cannot apply to asynchronous schedule 'pipedream'"},
           {" --schedule pipemare --activation-policy recompute", "keeps no copy of the weights a forward used"},
           {" --schedule pipedream --clip-norm 1", "clip_norm"},
           {" --schedule pipemare --checkpoint " + tmp_dir() + "/async.ckpt",
            "checkpoints of asynchronous schedule 'pipemare' are not supported yet"}}) {
    const auto bad = run(base + r.args);
    EXPECT_EQ(bad.exit_code, 2) << r.args;
    EXPECT_NE(bad.err.find(r.says), std::string::npos) << r.args << ": " << bad.err;
  }
}

}  // namespace

namespace {

TEST(PipeforgeCli, ADivergedRunStopsSaysSoAndWritesNoCheckpoint) {
  const std::string ckpt = tmp_dir() + "/diverged.ckpt";
  std::remove(ckpt.c_str());
  // A learning rate of 1e30 with SGD sends the MLP's loss to infinity or NaN within a few steps.
  const CommandResult r =
      run("train --model mlp --steps 50 --batch-size 16 --microbatches 2 --features 8 --hidden 16 --optimizer sgd "
          "--lr 1e30 --checkpoint " + ckpt + " --json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("training diverged at step"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no checkpoint written"), std::string::npos) << r.err;
  std::ifstream saved(ckpt);
  EXPECT_FALSE(saved.good()) << "a diverged model was saved to " << ckpt;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("diverged").get<bool>());
  EXPECT_LT(j.at("steps_run").get<int64_t>(), 50) << "training went on after the loss was not finite";
  EXPECT_FALSE(j.contains("checkpoint"));
}

}  // namespace
