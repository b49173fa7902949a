// `--data tokens:FILE` and `pipeforge eval`: a token file of a text's character ids trains exactly
// as the text does; eval's loss is the mean over every position of consecutive, non-overlapping
// windows (checked against eval of single windows and of the file's parts), whatever the batch;
// bad input named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::TempFolder;

constexpr int kSeqLen = 12;
const std::string kGpt = " --d-model 16 --heads 2 --layers 1 --seq-len 12";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// nanoGPT's format (uint16 little-endian, no header), or llm.c's GPT-2 one with `llmc`.
void write_tokens(const std::string& path, const std::vector<int>& tokens, bool llmc) {
  std::string bytes;
  auto put = [&](uint32_t v, int n) {
    for (int i = 0; i < n; ++i) bytes.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  if (llmc) {
    put(20240520, 4);
    put(1, 4);
    put(static_cast<uint32_t>(tokens.size()), 4);
    bytes.append(253 * 4, '\0');
  }
  for (int t : tokens) put(static_cast<uint32_t>(t), 2);
  std::ofstream(path, std::ios::binary) << bytes;
}

// The character text's token ids, computed here: id = rank of the byte among the text's distinct bytes.
std::vector<int> character_ids(const std::string& text, int* vocab) {
  const std::set<unsigned char> distinct(text.begin(), text.end());
  const std::vector<unsigned char> sorted(distinct.begin(), distinct.end());
  std::vector<int> ids;
  for (unsigned char c : text)
    ids.push_back(static_cast<int>(std::lower_bound(sorted.begin(), sorted.end(), c) - sorted.begin()));
  *vocab = static_cast<int>(sorted.size());
  return ids;
}

std::vector<int> slice(const std::vector<int>& v, size_t begin, size_t end) {
  return std::vector<int>(v.begin() + static_cast<long>(begin), v.begin() + static_cast<long>(end));
}

double eval_loss(const std::string& args) { return run_json("eval" + args)["loss"].get<double>(); }

TEST(TokenDataCli, ATokenFileOfTheTextsIdsTrainsExactlyAsTheText) {
  TempFolder dir("token_train");
  const std::string text = read_file("/usr/share/common-licenses/Apache-2.0").substr(0, 6000);
  std::ofstream(dir.path + "/text.txt", std::ios::binary) << text;
  int vocab = 0;
  write_tokens(dir.path + "/text.bin", character_ids(text, &vocab), true);
  const std::string common = kGpt + " --steps 4 --batch-size 4 --eval-every 2 --seed 5";
  const nlohmann::json from_text = run_json("train --quiet --data " + dir.path + "/text.txt" + common);
  const nlohmann::json from_tokens =
      run_json("train --quiet --data tokens:" + dir.path + "/text.bin --vocab " + std::to_string(vocab) + common);
  EXPECT_EQ(from_tokens["param_checksum"], from_text["param_checksum"]);
  EXPECT_EQ(from_tokens["losses"], from_text["losses"]);
  EXPECT_EQ(from_tokens["evaluations"], from_text["evaluations"]);
  EXPECT_EQ(from_tokens["config"]["data_format"], "llm.c GPT-2");
  EXPECT_EQ(from_tokens["config"]["vocab"], vocab);
  // Pipelined: the same stream feeds the schedule, bitwise as the sequential text run of the same
  // micro-batches.
  const nlohmann::json piped = run_json("train --quiet --data tokens:" + dir.path + "/text.bin --vocab " +
                                        std::to_string(vocab) + common + " --schedule 1f1b --stages 2 --micro-batches 2");
  const nlohmann::json text_in_two =
      run_json("train --quiet --data " + dir.path + "/text.txt" + common + " --micro-batches 2");
  EXPECT_EQ(piped["param_checksum"], text_in_two["param_checksum"]);
  EXPECT_EQ(piped["losses"], text_in_two["losses"]);
}

// --model llama on a token file: pipelined (1F1B and ZB-V) bitwise equal to sequential; its
// checkpoint evaluates (the model rebuilt from the checkpoint's JSON); eval of the initial
// weights is near ln(vocab) and training lowers it.
TEST(TokenDataCli, LlamaTrainsPipelinedBitwiseAndEvaluates) {
  TempFolder dir("token_llama");
  const std::string text = read_file("/usr/share/common-licenses/GPL-3").substr(0, 12000);
  int vocab = 0;
  write_tokens(dir.path + "/t.bin", character_ids(text, &vocab), false);
  const std::string llama = " --model llama --d-model 16 --heads 4 --kv-heads 2 --layers 2 --seq-len 12 --vocab " +
                            std::to_string(vocab) + " --data tokens:" + dir.path + "/t.bin --batch-size 4 --seed 3";
  const nlohmann::json seq = run_json("train --quiet" + llama + " --steps 3 --micro-batches 4");
  EXPECT_EQ(seq["model"], "llama");
  EXPECT_EQ(seq["config"]["kv_heads"], 2);
  for (const char* schedule : {" --schedule 1f1b --stages 2", " --schedule zb-v --stages 2 --chunks 2"}) {
    const nlohmann::json piped = run_json("train --quiet" + llama + " --steps 3 --micro-batches 4" + schedule);
    EXPECT_EQ(piped["param_checksum"], seq["param_checksum"]) << schedule;
    EXPECT_EQ(piped["losses"], seq["losses"]) << schedule;
  }
  run_json("train --quiet" + llama + " --steps 40 --checkpoint " + dir.path + "/trained.ckpt");
  const double initial = eval_loss(llama);  // the model options' initial weights
  const double trained = eval_loss(" --resume " + dir.path + "/trained.ckpt --data tokens:" + dir.path + "/t.bin");
  EXPECT_NEAR(initial, std::log(static_cast<double>(vocab)), 0.1);
  EXPECT_LT(trained, initial - 0.5);

  const CommandResult odd = run("train --quiet --model llama --heads 4 --kv-heads 3 --steps 1");
  EXPECT_EQ(odd.exit_code, 2);
  EXPECT_NE(odd.err.find("--kv-heads 3"), std::string::npos) << odd.err;
  const CommandResult gpt_kv = run("train --quiet --model gpt --kv-heads 2 --steps 1");
  EXPECT_EQ(gpt_kv.exit_code, 2);
  EXPECT_NE(gpt_kv.err.find("--kv-heads applies to --model llama"), std::string::npos) << gpt_kv.err;
}

TEST(TokenDataCli, EvalIsTheMeanOverEveryPositionOfConsecutiveWindows) {
  TempFolder dir("token_eval");
  const std::string text = read_file("/usr/share/common-licenses/GPL-3").substr(0, 20000);
  int vocab = 0;
  const std::vector<int> ids = character_ids(text, &vocab);
  const std::string model = kGpt + " --vocab " + std::to_string(vocab);
  write_tokens(dir.path + "/train.bin", ids, false);
  run_json("train --quiet --data tokens:" + dir.path + "/train.bin" + model + " --steps 6 --checkpoint " + dir.path +
           "/m.ckpt");

  const size_t w = kSeqLen + 1;
  // A: 5 whole windows; B: 3 windows and 4 tokens left over (dropped).
  const std::vector<int> a = slice(ids, 1000, 1000 + 5 * w), b = slice(ids, 5000, 5000 + 3 * w + 4);
  std::vector<int> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  write_tokens(dir.path + "/a.bin", a, false);
  write_tokens(dir.path + "/b.bin", b, true);
  write_tokens(dir.path + "/b_whole.bin", slice(b, 0, 3 * w), false);
  write_tokens(dir.path + "/ab.bin", ab, false);
  const std::string weights = " --resume " + dir.path + "/m.ckpt --data tokens:" + dir.path;

  const nlohmann::json on_a = run_json("eval" + weights + "/a.bin");
  EXPECT_EQ(on_a["windows"], 5);
  EXPECT_EQ(on_a["tokens_scored"], 5 * kSeqLen);
  EXPECT_EQ(on_a["seq_len"], kSeqLen);
  const double loss_a = on_a["loss"].get<double>();
  // The mean of the single windows' losses.
  double sum = 0;
  for (size_t i = 0; i < 5; ++i) {
    write_tokens(dir.path + "/one.bin", slice(a, i * w, (i + 1) * w), false);
    sum += eval_loss(weights + "/one.bin");
  }
  EXPECT_NEAR(loss_a, sum / 5, 1e-6 * loss_a);
  // Any batch: 1, 2 (the last batch smaller) or all at once.
  for (const char* rows : {"1", "2", "64"})
    EXPECT_NEAR(eval_loss(weights + "/a.bin --batch-size " + rows), loss_a, 1e-6 * loss_a) << rows;
  // The remainder dropped, and windows that do not straddle the files' seam.
  const double loss_b = eval_loss(weights + "/b.bin");
  EXPECT_NEAR(loss_b, eval_loss(weights + "/b_whole.bin"), 1e-6 * loss_b);
  EXPECT_NEAR(eval_loss(weights + "/ab.bin --batch-size 3"), (5 * loss_a + 3 * loss_b) / 8, 1e-6 * loss_a);
  // Trained weights do better on the text than the initial ones.
  const double untrained = eval_loss(" --data tokens:" + dir.path + "/a.bin" + model);
  EXPECT_LT(loss_a, untrained - 0.1);
  // Shorter windows than the model's positions.
  EXPECT_EQ(run_json("eval" + weights + "/a.bin --seq-len 5")["windows"], 65 / 6);
}

TEST(TokenDataCli, BadInputIsNamed) {
  TempFolder dir("token_bad");
  write_tokens(dir.path + "/t.bin", std::vector<int>(200, 7), false);
  std::ofstream(dir.path + "/odd.bin", std::ios::binary) << "abc";
  const std::string tokens = " --data tokens:" + dir.path + "/t.bin";
  run_json("train --quiet --steps 1 --layers 1 --d-model 8 --heads 2 --seq-len 8 --vocab 9" + tokens +
           " --checkpoint " + dir.path + "/m.ckpt");
  struct Case {
    std::string args;
    int exit_code;
    std::string says;
  } cases[] = {
      {"train --steps 1" + tokens, 2, "needs --vocab"},
      {"train --steps 1" + tokens + " --vocab 5", 1, " is 7, outside the model's vocabulary of 5"},
      {"train --steps 1 --data tokens:" + dir.path + "/odd.bin --vocab 9", 2, "holds 3 bytes, an odd number"},
      {"train --steps 1 --data tokens:" + dir.path + "/missing.bin --vocab 9", 2, "missing.bin"},
      {"train --steps 1" + tokens + " --data " + dir.path + "/odd.bin --vocab 9", 2, "a token file is the only data"},
      {"train --model mlp --vocab 9 --steps 1", 2, "--vocab applies to --model gpt or llama only"},
      {"eval --data " + dir.path + "/t.bin --vocab 9", 2, "eval reads a token file: --data tokens:FILE"},
      {"eval" + tokens + " --vocab 9 --seq-len 300", 2, "fewer than one window of seq_len + 1 = 301"},
      {"eval" + tokens + " --seq-len 100 --resume " + dir.path + "/m.ckpt", 2,
       "--seq-len 100 is longer than the model's 8 positions"},
      {"eval" + tokens + " --vocab 9 --seq-len 8 --model-file " + dir.path + "/t.bin", 2, "--model-file"},
      {"eval" + tokens + " --resume " + dir.path + "/none.ckpt", 2, "none.ckpt"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
