// `pipeforge eval`: the mean cross-entropy of a token model over a whole token file, read as
// consecutive non-overlapping windows of --seq-len + 1 tokens (runtime/data/token_file.h,
// ConsecutiveWindows; the remainder dropped): inputs a window's first S tokens, targets its last S,
// every position of every window counted once. The model: a checkpoint's (--resume, the model it
// was saved with unless model options are given) or the model options' (as `train` takes them).
// A short report, or one JSON object with --json (docs/CLI.md, "eval"). --logits FILE also writes
// the model's output for every window as a safetensors file ("logits", f32 [windows, S, vocab]):
// what comparisons with another implementation (tests/interop) read. With --data cifar10:PATH: the
// mean cross-entropy and accuracy of a model with feature input of width 3072 over CIFAR-10's test
// images (a folder's test_batch.bin, or every record of one file), --batch-size images a pass.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>

#include "tools/cli/train_command.h"

namespace pf::cli {

struct EvalArgs {
  TrainArgs model;     // the model options and --data, as `train` reads them
  bool model_given = false;    // a model option was on the command line
  bool seq_len_given = false;  // --seq-len was; else the model's
  std::string resume;  // a checkpoint file or folder (a series folder: its newest)
  int64_t batch_size = 8;  // windows (images) per forward pass
  std::string logits;      // write every window's logits here (safetensors), or ""
  bool json = false;
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
// Fills model_given and seq_len_given from what `cmd` parsed.
void note_eval_options(const CLI::App& cmd, EvalArgs& args);
int run_eval(const EvalArgs& args);

}  // namespace pf::cli
