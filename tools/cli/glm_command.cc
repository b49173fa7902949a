#include "tools/cli/glm_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/glm/libsvm.h"
#include "tools/cli/cli.h"
#include "tools/cli/progress.h"
#include "tools/cli/validators.h"

namespace pf::cli {

CLI::App* add_glm_command(CLI::App& app, GlmArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "glm", "train a linear model (logistic, ridge, linear SVM) by parallel coordinate descent on libsvm data");
  cmd->add_option("--loss", a.loss, "logistic (labels: two classes), squared (ridge regression) or hinge (linear SVM)")
      ->required()
      ->check(CLI::IsMember({"logistic", "squared", "hinge"}));
  cmd->add_option("--data", a.data, "the examples, in libsvm format (<label> <feature>:<value> ..., features from 1)")
      ->required();
  cmd->add_option("--lambda", a.lambda, "L2 regularisation λ of (1/n) Σ loss + (λ/2) ‖w‖²")
      ->required()
      ->check(positive_number());
  cmd->add_option("--l1", a.l1,
                  "L1 regularisation μ: the elastic net (1/n) Σ loss + (λ/2) ‖w‖² + μ ‖w‖₁ (0: none; L1 needs --lambda > 0 "
                  "beside it for the dual)")
      ->check(CLI::Range(0.0, 1e300))
      ->capture_default_str();
  cmd->add_option("--solver", a.solver,
                  "sequential, async (lock-free threads on one shared w) or syscd (buckets, per-thread replicas, "
                  "dynamic partitioning)")
      ->check(CLI::IsMember({"sequential", "async", "syscd"}))
      ->capture_default_str();
  cmd->add_option("--threads", a.threads, "threads of async and syscd (default: every hardware thread; sequential: 1)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tol", a.tol, "stop when the duality gap is at most tol x the objective")
      ->check(CLI::Range(1e-15, 0.5))
      ->capture_default_str();
  cmd->add_option("--max-epochs", a.max_epochs, "passes over the data at most")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--seed", a.seed, "the orders of the examples")->capture_default_str();
  cmd->add_option("--features", a.features, "d features (default: the largest index in the file)")
      ->check(CLI::Range(int64_t{1}, int64_t{4294967295}));
  cmd->add_option("--bucket-rows", a.bucket_rows, "syscd: examples per bucket (default: about 1 KiB of values)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--weights", a.weights_file, "write the model as JSON (loss, lambda, labels, weights)");
  cmd->add_flag("--json", a.json, "print one JSON object on stdout");
  cmd->add_flag("--quiet", a.quiet, "no summary (with --json: nothing on stderr)");
  return cmd;
}

int run_glm(const GlmArgs& a) {
  glm::GlmOptions o;
  try {
    o.loss = glm::parse_loss(a.loss);
    o.solver = glm::parse_solver(a.solver);
    o.lambda = a.lambda;
    o.l1 = a.l1;
    o.threads = a.threads > 0 ? a.threads : glm::default_threads(o.solver);
    o.tol = a.tol;
    o.max_epochs = a.max_epochs;
    o.seed = a.seed;
    o.bucket_rows = a.bucket_rows;
    o.validate();
    if (!a.weights_file.empty()) check_output_path(a.weights_file, "--weights");
  } catch (const Error& e) {
    std::cerr << "pipeforge glm: " << e.what() << "\n";
    return kExitUsage;
  }
  const auto start = std::chrono::steady_clock::now();
  glm::LibsvmOptions read;
  read.features = a.features;
  glm::GlmData data;
  std::pair<double, double> classes{-1, 1};
  try {
    data = glm::dense_if_worthwhile(glm::read_libsvm(a.data, read));
    if (o.loss != glm::Loss::kSquared) classes = glm::to_signed_labels(data);
  } catch (const Error& e) {
    std::cerr << "pipeforge glm: " << e.what() << "\n";
    return e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kNotFound ? kExitUsage : kExitFailure;
  }
  const double load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const glm::GlmResult r = glm::train_glm(data, o);

  nlohmann::json out = r.to_json();
  out["command"] = "glm";
  out["data"] = a.data;
  out["examples"] = data.rows;
  out["features"] = data.cols;
  out["nonzeros"] = data.nonzeros();
  out["dense"] = data.dense;
  out["load_seconds"] = load_seconds;
  out["options"] = o.to_json();
  const int64_t zero_weights = std::count(r.weights.begin(), r.weights.end(), 0.0);
  out["zero_weights"] = zero_weights;  // what L1 zeroes (none but by chance without it)
  if (o.loss != glm::Loss::kSquared) out["labels"] = {{"negative", classes.first}, {"positive", classes.second}};
  if (!a.weights_file.empty()) {
    nlohmann::json model = {{"loss", a.loss}, {"lambda", a.lambda}, {"features", data.cols}, {"weights", r.weights}};
    if (a.l1 > 0) model["l1"] = a.l1;
    if (o.loss != glm::Loss::kSquared) model["labels"] = out["labels"];
    write_output_file(a.weights_file, model.dump(1) + "\n", "--weights");
    out["weights_file"] = a.weights_file;
  }
  if (a.json) {
    std::cout << out.dump() << std::endl;
  } else if (!a.quiet) {
    const std::string l1 = a.l1 > 0 ? ", l1 " + format_number(a.l1) : "";
    std::printf("%s, lambda %s%s, %s on %d thread%s: %lld examples x %lld features (%s, %lld values) from %s\n",
                a.loss.c_str(), format_number(a.lambda).c_str(), l1.c_str(), glm::solver_name(o.solver), o.threads,
                o.threads == 1 ? "" : "s", static_cast<long long>(data.rows), static_cast<long long>(data.cols),
                data.dense ? "dense" : "sparse", static_cast<long long>(data.nonzeros()), a.data.c_str());
    std::printf("objective %.10g (dual %.10g, gap %.3g) after %d epochs%s, %.3f s (loading: %.3f s)\n", r.objective,
                r.dual_objective, r.duality_gap, r.epochs, r.converged ? "" : " (not converged: --max-epochs)",
                r.seconds, load_seconds);
    if (std::isfinite(r.accuracy)) std::printf("training accuracy %.4f\n", r.accuracy);
    if (a.l1 > 0)
      std::printf("%lld of %lld weights are zero\n", static_cast<long long>(zero_weights), static_cast<long long>(data.cols));
    if (!a.weights_file.empty()) std::printf("weights written to %s\n", a.weights_file.c_str());
  }
  if (!r.converged && !a.quiet)
    std::cerr << "pipeforge glm: warning: the duality gap " << r.duality_gap << " is still above --tol x objective after "
              << r.epochs << " epochs (raise --max-epochs or --tol)\n";
  return kExitOk;
}

}  // namespace pf::cli
