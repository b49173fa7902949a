#include "tools/cli/sweep_command.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/sweep/alone.h"
#include "runtime/sweep/sweep.h"
#include "runtime/sweep/sweep_fill.h"
#include "tools/cli/cli.h"
#include "tools/cli/progress.h"
#include "tools/cli/validators.h"

namespace pf::cli {

namespace {

// The spec: the file's, then every option given on the command line over it.
sweep::SweepSpec spec_of(const SweepArgs& a) {
  nlohmann::json j = nlohmann::json::object();
  if (!a.spec_file.empty()) j = sweep::read_sweep_spec_file(a.spec_file).to_json();
  for (const CLI::Option* o : a.given) {
    const std::string name = o->get_name();  // "--feature-scale"
    std::string key = name.substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "data") j[key] = a.data;
    else if (key == "feature_scale") j[key] = a.feature_scale;
    else if (key == "held_out") j[key] = a.held_out;
    else if (key == "features") j[key] = a.features;
    else if (key == "classes") j[key] = a.classes;
    else if (key == "samples") j[key] = a.samples;
    else if (key == "hidden") j[key] = a.hidden;
    else if (key == "activations") j[key] = a.activations;
    else if (key == "lr") j[key] = a.lr;
    else if (key == "repeats") j[key] = a.repeats;
    else if (key == "seed") j[key] = a.seed;
    else if (key == "optimizer") j[key] = a.optimizer;
    else if (key == "momentum") j[key] = a.momentum;
    else if (key == "weight_decay") j[key] = a.weight_decay;
    else if (key == "batch") j[key] = a.batch;
    else if (key == "epochs") j[key] = a.epochs;
  }
  return sweep::SweepSpec::from_json(j, a.spec_file.empty() ? "sweep" : a.spec_file);
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "sweep", "train a grid of one-hidden-layer MLPs together as one packed network and rank them (ParallelMLPs)");
  auto given = [&a](CLI::Option* o) {
    a.given.push_back(o);
    return o;
  };
  cmd->add_option("--spec", a.spec_file, "the sweep as JSON (docs/SWEEP.md); options given here override its fields")
      ->check(CLI::ExistingFile);
  given(cmd->add_option("--data", a.data,
                        "a CSV classification file: features, then the label (default: a synthetic task)"));
  given(cmd->add_option("--feature-scale", a.feature_scale, "CSV: every feature is multiplied by this (digits: 0.0625)"));
  given(cmd->add_option("--held-out", a.held_out, "share of the rows held out to rank the models")
            ->check(CLI::Range(0.0, 0.99)));
  given(cmd->add_option("--features", a.features, "synthetic: input features")->check(CLI::Range(int64_t{1}, int64_t{1} << 20)));
  given(cmd->add_option("--classes", a.classes, "synthetic: classes")->check(CLI::Range(int64_t{2}, int64_t{1} << 20)));
  given(cmd->add_option("--samples", a.samples, "synthetic: rows (training and held out)")
            ->check(CLI::Range(int64_t{2}, int64_t{1} << 31)));
  given(cmd->add_option("--hidden", a.hidden, "hidden widths, e.g. 8,16,32 (default 8,16,32)")
            ->delimiter(',')
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 31)));
  given(cmd->add_option("--activations", a.activations, "activations, e.g. relu,gelu (relu, gelu, tanh, sigmoid, identity)")
            ->delimiter(',')
            ->check(CLI::IsMember(sweep::activation_names())));
  given(cmd->add_option("--lr", a.lr, "learning rates, e.g. 0.01,0.003 (default 0.01)")->delimiter(',')->check(positive_number()));
  given(cmd->add_option("--repeats", a.repeats, "models of each combination, from seeds seed, seed + 1, ...")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 22)));
  given(cmd->add_option("--seed", a.seed, "the first seed; also the data's order"));
  given(cmd->add_option("--optimizer", a.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"})));
  given(cmd->add_option("--momentum", a.momentum, "sgd: momentum")->check(CLI::Range(0.0, 0.999999)));
  given(cmd->add_option("--weight-decay", a.weight_decay, "decoupled (adamw) or L2 (sgd)")->check(CLI::NonNegativeNumber));
  given(cmd->add_option("--batch", a.batch, "rows per step (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 31)));
  given(cmd->add_option("--epochs", a.epochs, "passes over the training rows (default 10)")->check(CLI::Range(int64_t{1}, int64_t{1000000})));
  cmd->add_option("--threads", a.threads, "threads, each training its share of the models (default: every hardware thread)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--top", a.top, "rows of the ranked table (0: every model)")->check(CLI::Range(int64_t{0}, int64_t{1} << 40))->capture_default_str();
  cmd->add_option("--check-alone", a.check_alone,
                  "also train this many of the models alone (the library's MLP and sequential trainer, evenly spaced "
                  "through the grid; relu and gelu only): compare their held-out results and time, print the speed-up")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 22));
  cmd->add_option("--results", a.results_file, "write every model's result as JSON (what --json prints)");
  cmd->add_flag("--json", a.json, "print one JSON object on stdout");
  cmd->add_flag("--quiet", a.quiet, "no table (with --json: nothing on stderr)");
  return cmd;
}

int run_sweep(SweepArgs& a) {
  // Only the options actually given override the spec.
  a.given.erase(std::remove_if(a.given.begin(), a.given.end(), [](const CLI::Option* o) { return o->count() == 0; }),
                a.given.end());
  sweep::SweepSpec spec;
  std::shared_ptr<const sweep::SweepData> data;
  try {
    spec = spec_of(a);
    if (!a.results_file.empty()) check_output_path(a.results_file, "--results");
    data = sweep::load_sweep_data(spec);
  } catch (const Error& e) {
    std::cerr << "pipeforge sweep: " << e.what() << "\n";
    return e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kNotFound ? kExitUsage : kExitFailure;
  }
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto t0 = std::chrono::steady_clock::now();
  sweep::Sweep sweep(spec, data, threads);
  const double setup_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  sweep.run(threads);
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const std::vector<sweep::ModelResult> results = sweep::ranked(sweep.results());

  nlohmann::json out = {{"command", "sweep"},
                        {"spec", spec.to_json()},
                        {"data", data->description},
                        {"model_count", sweep.models()},
                        {"threads", threads},
                        {"steps_per_model", sweep.steps_per_model()},
                        {"setup_seconds", setup_seconds},
                        {"train_seconds", train_seconds},
                        {"model_steps_per_second", static_cast<double>(sweep.model_steps()) / train_seconds}};
  nlohmann::json models = nlohmann::json::array();
  for (const sweep::ModelResult& r : results) models.push_back(r.to_json());
  out["models"] = models;

  if (a.check_alone > 0) {
    // Evenly spaced relu/gelu models of the grid, alone on one thread each in turn.
    std::vector<int64_t> candidates;
    const std::vector<sweep::MlpSpec> all = spec.models();
    for (size_t i = 0; i < all.size(); ++i)
      if (all[i].activation == sweep::Activation::kRelu || all[i].activation == sweep::Activation::kGelu)
        candidates.push_back(static_cast<int64_t>(i));
    const int64_t k = std::min<int64_t>(a.check_alone, static_cast<int64_t>(candidates.size()));
    std::vector<const sweep::ModelResult*> by_index(all.size());
    for (const sweep::ModelResult& r : results) by_index[static_cast<size_t>(r.index)] = &r;
    double alone_seconds = 0, worst = 0;
    nlohmann::json checked = nlohmann::json::array();
    for (int64_t c = 0; c < k; ++c) {
      const int64_t index = candidates[static_cast<size_t>(c * static_cast<int64_t>(candidates.size()) / k)];
      const sweep::AloneRun run = sweep::train_alone(spec, data, index);
      alone_seconds += run.train_seconds;
      const sweep::ModelResult& packed = *by_index[static_cast<size_t>(index)];
      const double diff = std::isfinite(run.held_out_loss)
                              ? std::abs(run.held_out_loss - packed.held_out_loss) / run.held_out_loss
                              : 0.0;
      worst = std::max(worst, diff);
      checked.push_back({{"index", index}, {"alone_held_out_loss", run.held_out_loss},
                         {"packed_held_out_loss", packed.held_out_loss}, {"alone_seconds", run.train_seconds}});
    }
    if (k > 0) {
      // Alone, the grid would take its models' mean time each, one after another on one thread.
      const double per_model = alone_seconds / static_cast<double>(k);
      const double all_alone = per_model * static_cast<double>(sweep.models());
      const double packed_one_thread = train_seconds * threads;
      out["check_alone"] = {{"models", checked},
                            {"max_relative_difference", worst},
                            {"alone_seconds_per_model", per_model},
                            {"alone_seconds_for_all", all_alone},
                            {"speedup", all_alone / train_seconds},
                            {"speedup_per_thread", all_alone / packed_one_thread}};
    }
  }
  if (!a.results_file.empty()) write_output_file(a.results_file, out.dump(1) + "\n", "--results");

  if (a.json) {
    std::cout << out.dump() << std::endl;
    return kExitOk;
  }
  if (a.quiet) return kExitOk;
  std::printf("%lld models trained together on %d thread%s: %lld steps each (%lld epochs of %lld batches) in %.3f s, "
              "%.0f model-steps/s\n",
              static_cast<long long>(sweep.models()), threads, threads == 1 ? "" : "s",
              static_cast<long long>(sweep.steps_per_model()), static_cast<long long>(spec.epochs),
              static_cast<long long>(sweep.steps_per_model() / spec.epochs), train_seconds,
              static_cast<double>(sweep.model_steps()) / train_seconds);
  std::printf("data: %s\n\n", data->description.c_str());
  const bool held = data->held_out_rows() > 0;
  std::printf("%5s %6s %7s %-9s %9s %6s %10s %10s %8s\n", "rank", "model", "hidden", "activation", "lr", "seed",
              "train", held ? "held-out" : "", held ? "accuracy" : "");
  const size_t rows = a.top == 0 ? results.size() : std::min(results.size(), static_cast<size_t>(a.top));
  for (size_t k = 0; k < rows; ++k) {
    const sweep::ModelResult& r = results[k];
    std::printf("%5zu %6lld %7lld %-10s %9s %6llu %10s %10s %8s\n", k + 1, static_cast<long long>(r.index),
                static_cast<long long>(r.spec.hidden), sweep::activation_name(r.spec.activation),
                format_number(r.spec.lr).c_str(), static_cast<unsigned long long>(r.spec.seed),
                fixed(r.train_loss, 4).c_str(), held ? fixed(r.held_out_loss, 4).c_str() : "",
                held ? fixed(r.held_out_accuracy, 4).c_str() : "");
  }
  if (rows < results.size()) std::printf("  ... %zu more (--top 0 lists every model)\n", results.size() - rows);
  if (out.contains("check_alone")) {
    const nlohmann::json& c = out["check_alone"];
    std::printf("\nalone: %zu models trained one by one (the library's MLP and sequential trainer), held-out losses\n"
                "equal to the packed ones within %.1e (relative), %.4f s each: all %lld one after another would take\n"
                "about %.2f s, so the packed sweep is %.1fx faster (%.1fx per thread)\n",
                c["models"].size(), c["max_relative_difference"].get<double>(),
                c["alone_seconds_per_model"].get<double>(), static_cast<long long>(sweep.models()),
                c["alone_seconds_for_all"].get<double>(), c["speedup"].get<double>(),
                c["speedup_per_thread"].get<double>());
  }
  if (!a.results_file.empty()) std::printf("results written to %s\n", a.results_file.c_str());
  return kExitOk;
}

}  // namespace pf::cli
