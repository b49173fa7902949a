// PipeForge against the real Hugging Face Transformers (issue 39): a random LlamaForCausalLM and a
// GPT2LMHeadModel made and saved by Transformers are imported (`--init-from`) and evaluated with the
// same logits (within 1e-4) and loss (within 1e-5); models PipeForge trained pipelined from them
// and exported (`export --names hf-llama | hf-gpt2`) load in Transformers with the same logits and loss. Transformers
// runs in the venv of tools/hf_venv.sh, which tools/test.sh makes and passes as
// PIPEFORGE_HF_PYTHON; without it (PyPI unreachable, or `bazel test` run directly) the tests skip
// themselves.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run_json;
using pftest::run_shell;
using pftest::TempFolder;

constexpr int kSeqLen = 16;
constexpr double kLogitTolerance = 1e-4, kLossTolerance = 1e-5;

std::string hf_python() {
  const char* p = std::getenv("PIPEFORGE_HF_PYTHON");
  return p == nullptr ? "" : p;
}

std::string python_line(const std::string& args) {
  return hf_python() + " tests/interop/transformers_check.py " + args;
}

nlohmann::json python_json(const std::string& args) {
  const CommandResult r = run_shell(python_line(args));
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
  return nlohmann::json::parse(r.out);
}

// PipeForge's eval of `weights` on the token file, its logits written to `logits`, then
// Transformers' on the folder `hf`: equal loss and logits.
void expect_same_as_transformers(const std::string& weights, const std::string& hf, const std::string& tokens,
                                 const std::string& logits) {
  const nlohmann::json ours = run_json("eval " + weights + " --data tokens:" + tokens + " --seq-len " +
                                       std::to_string(kSeqLen) + " --logits " + logits);
  const nlohmann::json theirs =
      python_json("compare " + hf + " " + tokens + " " + std::to_string(kSeqLen) + " " + logits);
  std::cout << "PipeForge loss " << ours["loss"] << ", Transformers " << theirs["loss"] << "; largest logit difference "
            << theirs["max_logit_diff"] << " (largest logit " << theirs["max_logit"] << ")\n";
  EXPECT_EQ(ours["windows"], theirs["windows"]);
  EXPECT_NEAR(ours["loss"].get<double>(), theirs["loss"].get<double>(), kLossTolerance);
  EXPECT_LT(theirs["max_logit_diff"].get<double>(), kLogitTolerance);
  EXPECT_GT(theirs["max_logit"].get<double>(), 3.0);  // far from uniform: the comparison can fail
}

// Made by Transformers, imported, evaluated: the same logits and loss.
void made_by_transformers_evaluates_alike(const std::string& family) {
  TempFolder dir("hf_import_" + family);
  ASSERT_EQ(run_shell(python_line("make-" + family + " " + dir.path + "/hf " + dir.path + "/t.bin")).exit_code, 0);
  expect_same_as_transformers("--init-from " + dir.path + "/hf", dir.path + "/hf", dir.path + "/t.bin",
                              dir.path + "/logits.safetensors");
}

// Fine-tuned from the Transformers folder, pipelined with split backward over 2 stages (the GPT-2's
// tied head: its gradient swapped between the first and the last stage), exported, loaded by
// Transformers: the same logits and loss.
void trained_by_pipeforge_loads_in_transformers(const std::string& family) {
  TempFolder dir("hf_export_" + family);
  const std::string hf = dir.path + "/hf", tokens = dir.path + "/t.bin";
  ASSERT_EQ(run_shell(python_line("make-" + family + " " + hf + " " + tokens)).exit_code, 0);
  const nlohmann::json trained =
      run_json("train --quiet --init-from " + hf + " --data tokens:" + tokens +
               " --steps 12 --batch-size 8 --schedule zb-h1 --stages 2 --micro-batches 4 --checkpoint " + dir.path +
               "/ck");
  EXPECT_LT(trained["loss"].get<double>(), trained["first_loss"].get<double>());
  run_json("export --resume " + dir.path + "/ck --names hf-" + family + " --out " + dir.path + "/out");
  expect_same_as_transformers("--resume " + dir.path + "/ck", dir.path + "/out", tokens, dir.path + "/l.safetensors");
}

TEST(Transformers, ALlamaMadeByTransformersEvaluatesAlike) {
  if (hf_python().empty()) GTEST_SKIP() << "no Transformers venv (tools/hf_venv.sh; PIPEFORGE_HF_PYTHON unset)";
  made_by_transformers_evaluates_alike("llama");
}

TEST(Transformers, APipeForgeTrainedLlamaLoadsInTransformers) {
  if (hf_python().empty()) GTEST_SKIP() << "no Transformers venv (tools/hf_venv.sh; PIPEFORGE_HF_PYTHON unset)";
  trained_by_pipeforge_loads_in_transformers("llama");
}

TEST(Transformers, AGpt2MadeByTransformersEvaluatesAlike) {
  if (hf_python().empty()) GTEST_SKIP() << "no Transformers venv (tools/hf_venv.sh; PIPEFORGE_HF_PYTHON unset)";
  made_by_transformers_evaluates_alike("gpt2");
}

TEST(Transformers, APipeForgeTrainedGpt2LoadsInTransformers) {
  if (hf_python().empty()) GTEST_SKIP() << "no Transformers venv (tools/hf_venv.sh; PIPEFORGE_HF_PYTHON unset)";
  trained_by_pipeforge_loads_in_transformers("gpt2");
}

}  // namespace
