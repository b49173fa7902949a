// `pipeforge sweep` trains a grid of one-hidden-layer MLPs (hidden widths × activations × learning
// rates × repeats) as packed networks (runtime/sweep) and prints them ranked by held-out loss.
#pragma once

#include "tools/cli/cli_fwd.h"
#include <cstdint>
#include <string>
#include <vector>

namespace pf::cli {

struct SweepArgs {
  std::string spec_file;  // JSON (runtime/sweep/sweep.h SweepSpec); the flags given override it
  std::string data;
  double feature_scale = 1.0;
  double held_out = 0.2;
  int64_t features = 16, classes = 4, samples = 1000;
  std::vector<int64_t> hidden;
  std::vector<std::string> activations;
  std::vector<double> lr;
  int64_t repeats = 1;
  uint64_t seed = 0;
  std::string optimizer = "adamw";
  double momentum = 0, weight_decay = 0;
  int64_t batch = 32, epochs = 10;
  int threads = 0;       // 0: every hardware thread
  int64_t top = 10;      // rows of the table (0: all)
  int64_t check_alone = 0;
  std::string results_file;
  bool json = false;
  bool quiet = false;
  // Which options were given (they override the spec file).
  std::vector<const CLI::Option*> given;
};

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args);
int run_sweep(SweepArgs& args);

}  // namespace pf::cli
