// libFuzzer target: config and plan files of `pipeforge train` (tools/cli/train_config.h).
// Input: a file's text, applied once as --config and once as --plan (read through the one input
// rule, runtime/core/input_file.h). Oracles, besides "no crash, no exception other than pf::Error":
//  * a config the command line accepts round-trips: its effective config (--print-config), written
//    out and applied as a config to fresh arguments, gives the same effective config;
//  * a plan never sets a path the run writes (docs/LIMITS.md, "Who may choose output paths").
#include <CLI/CLI.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tools/cli/train_command.h"
#include "tools/cli/train_config.h"

namespace {

constexpr const char* kTarget = "train_config";
std::string g_dir;

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) pf::fuzz::finding(kTarget, "harness: cannot write " + path);
}

// Applies `path` as a config (plan: false) or a plan file to fresh arguments; returns them.
pf::cli::TrainArgs applied(const std::string& path, bool plan) {
  CLI::App app;
  pf::cli::TrainArgs args;
  CLI::App* train = pf::cli::add_train_command(app, args);
  (plan ? args.plan : args.config) = path;
  pf::cli::apply_train_config(*train, args);
  return args;
}

void fuzz_one(const std::string& bytes) {
  const std::string input = g_dir + "/input.json";
  write_file(input, bytes);
  pf::fuzz::run_input(kTarget, [&] {
    const pf::cli::TrainArgs args = applied(input, false);
    const nlohmann::ordered_json effective = pf::cli::effective_train_config(args);
    const std::string again = g_dir + "/effective.json";
    write_file(again, effective.dump(2));
    const pf::cli::TrainArgs reread =
        pf::fuzz::must_succeed(kTarget, "the effective config applied again", [&] { return applied(again, false); });
    const nlohmann::ordered_json effective_again = pf::cli::effective_train_config(reread);
    FUZZ_CHECK(kTarget, effective_again == effective,
               "the effective config does not round-trip: " + effective.dump() + " vs " + effective_again.dump());
  });
  pf::fuzz::run_input(kTarget, [&] {
    const pf::cli::TrainArgs args = applied(input, true);
    for (const std::string* path : {&args.trace_file, &args.svg_file, &args.metrics_log, &args.checkpoint,
                                    &args.checkpoint_dir, &args.offload_dir})
      FUZZ_CHECK(kTarget, path->empty(), "a plan chose the output path '" + *path + "'");
  });
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  pf::fuzz::quiet_runtime_log();
  g_dir = pf::fuzz::make_work_dir(kTarget);
  std::atexit([] {
    for (const char* f : {"/input.json", "/effective.json"}) std::remove((g_dir + f).c_str());
    ::rmdir(g_dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_one(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
