#include "tools/cli/cli.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>

#include "tools/cli/schedule_command.h"
#include "tools/cli/train_command.h"

namespace pf::cli {

int run(int argc, char** argv) {
  CLI::App app{"PipeForge: pipeline-parallel training runtime", "pipeforge"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pipeforge 0.1");

  TrainArgs train_args;
  CLI::App* train = add_train_command(app, train_args);
  ScheduleArgs schedule_args, simulate_args;
  CLI::App* schedule = add_schedule_command(app, schedule_args);
  CLI::App* simulate = add_simulate_command(app, simulate_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version print and succeed; every real parse error is a usage error (exit 2).
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  try {
    if (train->parsed()) return run_train(train_args);
    if (schedule->parsed()) return run_schedule(schedule_args);
    if (simulate->parsed()) return run_simulate(simulate_args);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "pipeforge: error: " << e.what() << "\n";
    return kExitFailure;
  }
  return kExitUsage;
}

}  // namespace pf::cli
