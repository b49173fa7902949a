// `pipeforge predict`: the step time, FLOP rate and memory per GPU of a GPT configuration at
// (T, P, D) on a GPU cluster from a shipped preset or a JSON file (runtime/gpu_model/gpt_step.h,
// docs/PREDICT.md): a short report, or one JSON object with --json.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>

#include "runtime/gpu_model/gpt_step.h"

namespace pf::cli {

struct PredictArgs {
  std::string gpu;  // a preset name or a JSON file
  int gpus = 0;
  int tensor = 1, stages = 1, data = 1, chunks = 1;
  std::string schedule;
  int64_t global_batch = 0, micro_batch = 1;
  std::string recompute = "none", precision = "bf16", attention = "flash";
  bool sequence_parallel = false;
  gpu::GptShape model;
  bool json = false;
  std::string chakra;  // write Chakra traces of the step here
};

CLI::App* add_predict_command(CLI::App& app, PredictArgs& args);
int run_predict(const PredictArgs& args);

}  // namespace pf::cli
