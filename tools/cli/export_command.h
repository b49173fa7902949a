// `pipeforge export --names hf-llama --out DIR`: writes a model and its weights as a Hugging Face
// Transformers folder (config.json and model.safetensors; runtime/interop/hf_models.h) that
// `from_pretrained(DIR)` loads. The model and weights are taken as `eval` takes them: a checkpoint's
// (--resume; its model unless model options are given), a Transformers folder's (--init-from), or
// the model options' initial weights (--seed). docs/CLI.md, "export".
#pragma once

#include "tools/cli/cli_fwd.h"
#include <string>

#include "tools/cli/train_command.h"

namespace pf::cli {

struct ExportArgs {
  TrainArgs model;           // the model options, as `train` reads them
  bool model_given = false;  // a model option was on the command line
  std::string resume;        // a checkpoint file or folder (a series folder: its newest)
  std::string names = "hf-llama";
  std::string out;
  bool json = false;
};

CLI::App* add_export_command(CLI::App& app, ExportArgs& args);
// Fills model_given from what `cmd` parsed.
void note_export_options(const CLI::App& cmd, ExportArgs& args);
int run_export(const ExportArgs& args);

}  // namespace pf::cli
