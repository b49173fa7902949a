// `pipeforge glm` trains a linear model (logistic regression, ridge regression, a linear SVM) on a
// libsvm-format file by dual coordinate descent: sequential, asynchronous or SySCD (runtime/glm).
#pragma once

#include "tools/cli/cli_fwd.h"
#include <cstdint>
#include <string>

#include "runtime/glm/glm.h"

namespace pf::cli {

struct GlmArgs {
  std::string loss;
  std::string solver = "syscd";
  std::string data;
  std::string weights_file;  // "" = none: the weights as JSON
  double lambda = 0;
  double l1 = 0;  // μ of the elastic net's μ ‖w‖₁
  int threads = 0;           // 0: 1 for sequential, else every hardware thread
  double tol = 1e-6;
  int max_epochs = 1000;
  uint64_t seed = 0;
  int64_t features = 0;
  int64_t bucket_rows = 0;
  bool json = false;
  bool quiet = false;
};

CLI::App* add_glm_command(CLI::App& app, GlmArgs& args);
int run_glm(const GlmArgs& args);

}  // namespace pf::cli
