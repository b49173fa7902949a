#include "tools/cli/cli.h"
#include "tools/cli/launch_line.h"
#include "tools/cli/train_setup.h"

#include "runtime/run/capabilities.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "c_api/pipeforge.h"
#include "runtime/core/suggest.h"
#include "tools/cli/compare_command.h"
#include "tools/cli/eval_command.h"
#include "tools/cli/export_command.h"
#include "tools/cli/glm_command.h"
#include "tools/cli/sweep_command.h"
#include "tools/cli/plan_command.h"
#include "tools/cli/predict_command.h"
#include "tools/cli/process_probe.h"
#include "tools/cli/schedule_command.h"
#include "tools/cli/train_command.h"
#include "tools/cli/train_config.h"
#include "runtime/core/error.h"

namespace pf::cli {
namespace {

// The subcommands' names; hidden ones (group "", such as measure-processes, which `plan --measure`
// runs) only when asked for: they are never listed or suggested.
std::vector<std::string> subcommand_names(const CLI::App& app, bool hidden_too) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (hidden_too || !sub->get_group().empty()) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& n : option->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : option->get_snames()) names.push_back("-" + n);
  }
  return names;
}

// "; did you mean '--steps'?" for the first option on the command line that the chosen subcommand
// (or the program) does not know and that is close to one it does; "" when there is none.
std::string unknown_option_hint(CLI::App& app, int argc, char** argv) {
  CLI::App* command = &app;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (sub->get_name() == argv[i]) command = sub;
    break;
  }
  std::vector<std::string> known = option_names(*command);
  if (command != &app) {
    const std::vector<std::string> global = option_names(app);
    known.insert(known.end(), global.begin(), global.end());
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-", 1) != 0 || std::strcmp(argv[i], "-") == 0) continue;
    const std::string name = std::string(argv[i]).substr(0, std::string(argv[i]).find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string hint = did_you_mean(name, known);
    if (!hint.empty()) return hint;
  }
  return "";
}

}  // namespace

int run(int argc, char** argv) {
  remember_invocation(argc > 0 ? argv[0] : nullptr);
  CLI::App app{"PipeForge: pipeline-parallel training runtime", "pipeforge"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipeforge " PF_VERSION_STRING);

  TrainArgs train_args;
  CLI::App* train = add_train_command(app, train_args);
  EvalArgs eval_args;
  CLI::App* eval = add_eval_command(app, eval_args);
  ExportArgs export_args;
  CLI::App* export_cmd = add_export_command(app, export_args);
  ScheduleArgs schedule_args, simulate_args;
  CLI::App* schedule = add_schedule_command(app, schedule_args);
  CLI::App* simulate = add_simulate_command(app, simulate_args);
  CompareArgs compare_args;
  CLI::App* compare = add_compare_command(app, compare_args);
  PlanArgs plan_args;
  CLI::App* plan = add_plan_command(app, plan_args);
  PredictArgs predict_args;
  CLI::App* predict = add_predict_command(app, predict_args);
  GlmArgs glm_args;
  CLI::App* glm = add_glm_command(app, glm_args);
  SweepArgs sweep_args;
  CLI::App* sweep = add_sweep_command(app, sweep_args);
  ProcessProbeArgs probe_args;
  CLI::App* probe = add_process_probe_command(app, probe_args);

  // A first word that is no subcommand: say so, with the closest one (CLI11 would only say that a
  // subcommand is required).
  if (argc >= 2 && argv[1][0] != '-') {
    const std::vector<std::string> all = subcommand_names(app, true);
    if (std::find(all.begin(), all.end(), argv[1]) == all.end()) {
      const std::vector<std::string> commands = subcommand_names(app, false);
      std::string list;
      for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
      std::cerr << "pipeforge: unknown command '" << argv[1] << "'" << did_you_mean(argv[1], commands)
                << " (commands: " << list << ")\nRun with --help for more information.\n";
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version print and succeed; every real parse error is a usage error (exit 2). An
    // unknown option gets the closest known one.
    const std::string hint =
        dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr ? unknown_option_hint(app, argc, argv) : "";
    if (hint.empty()) {
      const int code = app.exit(e);
      return code == 0 ? kExitOk : kExitUsage;
    }
    std::cerr << e.what() << hint << "\nRun with --help for more information.\n";
    return kExitUsage;
  }

  try {
    if (train->parsed()) {
      try {
        apply_train_config(*train, train_args);
        if (adopt_checkpoint_model(*train, train_args) && !train_args.quiet && !train_args.json)
          std::cerr << "pipeforge train: the model and options of the run saved in " << train_args.resume
                    << " where none are given\n";
        resolve_train_defaults(train_args);
      } catch (const Error& e) {
        std::cerr << "pipeforge train: " << e.what() << "\n";
        return kExitUsage;
      }
      if (train_args.print_config) {
        std::cout << effective_train_config(train_args).dump(2) << std::endl;
        return kExitOk;
      }
      if (train_args.capabilities) {
        std::cout << (train_args.markdown ? capabilities_markdown() : capabilities_text());
        return kExitOk;
      }
      if (train_args.markdown) {
        std::cerr << "pipeforge train: --markdown applies to --capabilities\n";
        return kExitUsage;
      }
      return run_train(train_args);
    }
    if (schedule->parsed()) return run_schedule(schedule_args);
    if (simulate->parsed()) return run_simulate(simulate_args);
    if (compare->parsed()) return run_compare(compare_args);
    if (plan->parsed()) return run_plan(plan_args);
    if (predict->parsed()) return run_predict(predict_args);
    if (eval->parsed()) {
      note_eval_options(*eval, eval_args);
      return run_eval(eval_args);
    }
    if (export_cmd->parsed()) {
      note_export_options(*export_cmd, export_args);
      return run_export(export_args);
    }
    if (glm->parsed()) return run_glm(glm_args);
    if (sweep->parsed()) return run_sweep(sweep_args);
    if (probe->parsed()) return run_process_probe(probe_args);
  } catch (const std::bad_alloc&) {
    // Sizes from input are checked against docs/LIMITS.md's limits before large allocations; this
    // is what is left: say it in words, not as a type name.
    std::fflush(stdout);
    std::cerr << "pipeforge: error: out of memory (an allocation failed; see docs/LIMITS.md for the limits on input sizes)\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "pipeforge: error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace pf::cli
