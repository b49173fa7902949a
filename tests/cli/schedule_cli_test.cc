// `pipeforge schedule` and `pipeforge simulate` as a user runs them.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::run;
using pftest::run_json;
using pftest::tmp_dir;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ScheduleCli, PrintsTheTextFormThatSimulateReadsBack) {
  const auto r = run("schedule --schedule 1f1b --stages 4 --microbatches 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0: 0F0 0F1 0F2 0F3 0BW0 0F4 0BW1"), std::string::npos) << r.out;
  const std::string path = tmp_dir() + "/1f1b.txt";
  std::ofstream(path) << r.out;
  const auto from_file = run_json("simulate --schedule-file " + path);
  const auto generated = run_json("simulate --schedule 1f1b --stages 4 --microbatches 8");
  EXPECT_EQ(from_file.at("makespan"), generated.at("makespan"));
}

TEST(ScheduleCli, SequenceSlices) {
  const auto r = run("schedule --schedule seq1f1b --stages 2 --microbatches 2 --seq-slices 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("microbatches: 4\nseq_slices: 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 0: 0F0 0F1 0F2 0BW1 0F3 0BW0 0BW3 0BW2 0STEP"), std::string::npos) << r.out;
  const std::string path = tmp_dir() + "/seq1f1b.txt";
  std::ofstream(path) << r.out;
  EXPECT_EQ(run_json("simulate --schedule-file " + path + " --microbatches 2").at("makespan"),
            run_json("simulate --schedule seq1f1b --stages 2 --microbatches 2 --seq-slices 2").at("makespan"));
  // Rank s holds p - s + S - 1 units.
  EXPECT_EQ(run_json("simulate --schedule seq1f1b --stages 4 --microbatches 8 --seq-slices 4").at("peak_activations"),
            nlohmann::json({7, 6, 5, 4}));
  const auto bad = run("schedule --schedule 1f1b --stages 2 --microbatches 2 --seq-slices 2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("1f1b does not slice sequences"), std::string::npos) << bad.err;
}

TEST(ScheduleCli, SimulateJsonHasTheDocumentedFields) {
  const auto j = run_json("simulate --schedule 1f1b --stages 4 --microbatches 8");
  // Uniform costs, no communication: bubble (p-1)/(m+p-1) = 3/11.
  EXPECT_NEAR(j.at("bubble_rate").get<double>(), 3.0 / 11.0, 1e-12);
  EXPECT_DOUBLE_EQ(j.at("makespan").get<double>(), 33.0);
  EXPECT_EQ(j.at("peak_activations"), nlohmann::json({4, 3, 2, 1}));
  ASSERT_EQ(j.at("ranks").size(), 4u);
  for (const auto& rank : j.at("ranks")) {
    EXPECT_DOUBLE_EQ(rank.at("busy").get<double>() + rank.at("idle").get<double>(), 33.0);
  }
  const auto zb = run_json("simulate --schedule zb-h1 --stages 4 --microbatches 8 --t-f 1 --t-b 1 --t-w 0.5");
  // ZB-H1 bubble time (p-1)(T_F + T_B - T_W) = 4.5 on top of m(T_F+T_B+T_W) = 20.
  EXPECT_NEAR(zb.at("makespan").get<double>(), 24.5, 1e-9);
}

TEST(ScheduleCli, WritesTraceAndSvg) {
  const std::string trace = tmp_dir() + "/trace.json", svg = tmp_dir() + "/timeline.svg";
  const auto r = run("simulate --schedule zb-v --stages 4 --microbatches 8 --t-comm 0.1 --trace " + trace +
                     " --svg " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("bubble rate"), std::string::npos);
  EXPECT_NE(r.out.find("rank 3 |"), std::string::npos);  // the ASCII grid
  const auto events = nlohmann::json::parse(read_file(trace));
  EXPECT_TRUE(events.contains("traceEvents"));
  EXPECT_NE(read_file(svg).find("<svg"), std::string::npos);
}

TEST(ScheduleCli, AsynchronousSchedulesRunStepsWithoutAFlush) {
  // 1F1B without a flush on 4 ranks, uniform costs (F 1, BW 2): once full, one micro-batch every
  // 3 units; 3 steps of 16 run back to back and fill and drain once (3 F + 3 BW = 9).
  const auto j = run_json("simulate --schedule pipedream --stages 4 --microbatches 16");
  EXPECT_EQ(j.at("asynchronous"), true);
  EXPECT_EQ(j.at("windows"), 3);
  EXPECT_DOUBLE_EQ(j.at("steady_state_per_micro_batch").get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j.at("fill_and_drain").get<double>(), 9.0);
  EXPECT_DOUBLE_EQ(j.at("makespan").get<double>(), 3 * 16 * 3.0 + 9.0);
  const auto r = run("simulate --schedule pipedream --stages 4 --microbatches 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("no flush"), std::string::npos) << r.out;
  const auto bad = run("simulate --schedule pipemare --stages 2 --microbatches 4 --activation-policy recompute");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("pipemare"), std::string::npos) << bad.err;
}

TEST(ScheduleCli, WritesAndReadsPytorchCsv) {
  auto r = run("schedule --schedule zb-h1 --stages 2 --microbatches 2 --format pytorch");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n");
  r = run("schedule --schedule 1f1b --stages 2 --microbatches 2 --format pytorch --lower");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1");
  // A compute+comms dump with deferred receives (tests/schedules/pytorch_format_test.cc): only
  // posted semantics runs it.
  const std::string csv = tmp_dir() + "/deferred.csv";
  std::ofstream(csv) << "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1,0RESHARD\n"
                        "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n";
  r = run("simulate --format pytorch --schedule-file " + csv);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("blocking send/recv"), std::string::npos) << r.err;
  r = run("simulate --format pytorch --comm posted --json --t-comm 0.5 --schedule-file " + csv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("note: dropped line 1 (rank 0), cell 1 '0UNSHARD'"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j.at("makespan").get<double>(), 10.0);
  EXPECT_EQ(j.at("comm"), "posted");
}

TEST(ScheduleCli, BadInputIsAUsageErrorWithAReason) {
  auto r = run("simulate --schedule 2f2b --stages 4 --microbatches 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("2f2b"), std::string::npos) << r.err;
  r = run("simulate --stages 4 --microbatches 8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--schedule"), std::string::npos) << r.err;
  const std::string bad = tmp_dir() + "/bad.txt";
  std::ofstream(bad) << "0F0 0BW0\n1BW0 1F0\n";
  r = run("simulate --schedule-file " + bad);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  r = run("schedule --schedule interleaved-1f1b --stages 4 --microbatches 8 --chunks 65");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace

namespace {

TEST(ScheduleCli, ActivationPoliciesChangeThePredictedPeaks) {
  const auto none = pftest::run_json("simulate --schedule 1f1b --stages 4 --microbatches 8");
  const auto selective = pftest::run_json(
      "simulate --schedule 1f1b --stages 4 --microbatches 8 --activation-policy selective --activation-budget 2");
  EXPECT_EQ(none.at("peak_activations"), nlohmann::json({4, 3, 2, 1}));
  for (const auto& peak : selective.at("peak_activation_bytes")) EXPECT_LE(peak.get<double>(), 2.0);
  EXPECT_GT(selective.at("offloaded_bytes_per_step")[0].get<double>(), 0.0);
  const auto refused = pftest::run(
      "simulate --schedule 1f1b --stages 4 --microbatches 8 --activation-policy selective --activation-budget 0.5");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("smallest budget that works"), std::string::npos) << refused.err;
}

}  // namespace

// simulate --chakra: one Chakra trace per rank of the simulated step; refused where a trace cannot
// say what the schedule does.
TEST(ScheduleCli, WritesChakraTracesPerRank) {
  const std::string dir = tmp_dir() + "/chakra";
  const auto j = run_json("simulate --schedule zb-v --stages 4 --microbatches 8 --message-bytes 4096 --json --chakra " + dir);
  EXPECT_EQ(j.at("chakra").at("files"), 4) << j.dump();
  for (int rank = 0; rank < 4; ++rank) EXPECT_TRUE(std::ifstream(dir + "/pipeforge." + std::to_string(rank) + ".et").good());
  EXPECT_FALSE(std::ifstream(dir + "/pipeforge.4.et").good());
  const auto recompute =
      run_json("simulate --schedule 1f1b --stages 2 --microbatches 4 --activation-policy recompute --json --chakra " + dir + "2");
  EXPECT_EQ(recompute.at("chakra").at("files"), 2) << recompute.dump();
  const auto windowed = run("simulate --schedule pipedream --stages 2 --microbatches 4 --chakra " + dir + "3");
  EXPECT_EQ(windowed.exit_code, 2);
  EXPECT_NE(windowed.err.find("--chakra writes one step of a synchronous one-pipeline schedule"), std::string::npos)
      << windowed.err;
  const auto offload = run("simulate --schedule 1f1b --stages 2 --microbatches 4 --activation-policy offload-host "
                           "--chakra " + dir + "4");
  EXPECT_EQ(offload.exit_code, 2);
  EXPECT_NE(offload.err.find("does not express"), std::string::npos) << offload.err;
}
