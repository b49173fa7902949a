// Runs the `pipeforge` binary (a data dependency of the test) through the shell and captures its
// stdout, stderr and exit code.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace pftest {

struct CommandResult {
  int exit_code = -1;
  std::string out, err;
};

std::string tmp_dir();

// A fresh folder `name` under tmp_dir(), removed with everything in it when this goes.
struct TempFolder {
  std::string path;
  explicit TempFolder(const std::string& name);
  ~TempFolder();
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;
};
// The pipeforge binary of the runfiles.
std::string pipeforge_binary();
CommandResult run(const std::string& args);
// Any shell command line (a line the tool printed to run next), stdout and stderr apart.
CommandResult run_shell(const std::string& line);
// Runs with --json appended, expects exit code 0 and one JSON object on stdout.
nlohmann::json run_json(const std::string& args);

}  // namespace pftest
