#include "tests/cli/cli_runner.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pftest {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

std::string pipeforge_binary() {
  return env_or("TEST_SRCDIR", ".") + "/" + env_or("TEST_WORKSPACE", "pipeforge") + "/pipeforge";
}

std::string tmp_dir() { return env_or("TEST_TMPDIR", "/tmp"); }

TempFolder::TempFolder(const std::string& name) : path(tmp_dir() + "/" + name) {
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
}

TempFolder::~TempFolder() {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

CommandResult run(const std::string& args) { return run_shell("'" + pipeforge_binary() + "' " + args); }

CommandResult run_shell(const std::string& line) {
  const std::string err_path = tmp_dir() + "/stderr.txt";
  const std::string command = "{ " + line + " ; } 2>'" + err_path + "'";
  CommandResult r;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_path);
  std::stringstream text;
  text << err.rdbuf();
  r.err = text.str();
  // Under tools/sanitize.sh (docs/SANITIZERS.md) a sanitizer report from the binary fails the test,
  // whatever exit code the test expects.
  for (const char* report : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", ": runtime error: ",
                             "WARNING: ThreadSanitizer"}) {
    if (r.err.find(report) != std::string::npos) {
      ADD_FAILURE() << "sanitizer report from " << line << ":\n" << r.err;
      break;
    }
  }
  return r;
}

nlohmann::json run_json(const std::string& args) {
  const CommandResult r = run(args + " --json");
  EXPECT_EQ(r.exit_code, 0) << "pipeforge " << args << "\nstderr:\n" << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON object (" << e.what() << "):\n" << r.out;
    return nlohmann::json::object();
  }
}

}  // namespace pftest
