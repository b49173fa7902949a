#include "tools/cli/export_command.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/interop/hf_models.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/run/make_trainer.h"
#include "runtime/run/training_config.h"
#include "tools/cli/cli.h"
#include "tools/cli/train_config.h"
#include "tools/cli/train_config_of.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {

CLI::App* add_export_command(CLI::App& app, ExportArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a model and its weights as a Hugging Face Transformers folder (config.json, model.safetensors)");
  add_model_options(cmd, a.model);
  cmd->remove_option(cmd->get_option("--data"));
  cmd->add_option("--resume", a.resume,
                  "the weights of this checkpoint (file, sharded folder or series folder: its newest), and its "
                  "model unless model options are given");
  cmd->add_option("--names", a.names, "the tensor names and config: hf-llama (LlamaForCausalLM)")
      ->check(CLI::IsMember({"hf-llama", "hf-gpt2"}))
      ->capture_default_str();
  cmd->add_option("--out", a.out, "the folder to write (created; model.safetensors and config.json in it are replaced)")
      ->required();
  cmd->add_option("--seed", a.model.seed, "seed of the initial parameters (without --resume or --init-from)")
      ->capture_default_str();
  cmd->add_flag("--json", a.json, "print one JSON object");
  return cmd;
}

void note_export_options(const CLI::App& cmd, ExportArgs& a) { a.model_given = !model_options_given(cmd).empty(); }

int run_export(const ExportArgs& a) {
  std::string checkpoint;
  std::unique_ptr<Trainer> trainer;
  size_t tensors = 0;
  try {
    const HfFamily family = parse_hf_family(a.names, "--names");
    PF_CHECK_ARG(a.model.init_from.empty() || a.resume.empty(), "--init-from and --resume both give the weights; give one");
    if (!a.resume.empty()) checkpoint = resolve_checkpoint(a.resume);
    std::shared_ptr<Model> model = model_with_weights_of(a.model, checkpoint, a.model_given, "--resume " + a.resume);
    trainer = trainer_with_weights(model, a.model.seed, checkpoint, a.model.init_from);
    tensors = hf_tensor_map(*model, family).size();
    export_hf_folder(*model, family, a.out);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument && e.code() != ErrorCode::kNotFound &&
        e.code() != ErrorCode::kDataLoss && e.code() != ErrorCode::kUnimplemented)
      throw;
    std::cerr << "pipeforge export: " << e.what() << "\n";
    return kExitUsage;
  }
  if (a.json) {
    nlohmann::ordered_json out;
    out["format"] = "pipeforge.export/1";
    out["names"] = a.names;
    out["out"] = a.out;
    out["files"] = {"config.json", "model.safetensors"};
    out["tensors"] = tensors;
    out["parameters"] = trainer->model().num_distinct_parameter_elements();
    out["checkpoint"] = checkpoint.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(checkpoint);
    std::cout << out.dump(2) << std::endl;
  } else {
    std::cout << "export: " << tensors << " tensors (" << trainer->model().num_distinct_parameter_elements()
              << " parameters) as " << a.names << " to " << a.out << "/model.safetensors and " << a.out
              << "/config.json\n";
  }
  return 0;
}

}  // namespace pf::cli
