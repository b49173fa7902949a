#include "tools/cli/launch_line.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace pf::cli {
namespace {

std::string& invoked_as() {
  static std::string name = "pipeforge";
  return name;
}

}  // namespace

void remember_invocation(const char* argv0) {
  if (argv0 != nullptr && *argv0 != '\0') invoked_as() = argv0;
}

std::string this_command() {
  // A bare name was found on the PATH by the shell, and will be again.
  return shell_quote_if_needed(invoked_as());
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_quote_if_needed(const std::string& s) {
  if (s.empty()) return "''";
  for (char c : s) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       std::string("_./:=@%+,-").find(c) != std::string::npos;
    if (!plain) return shell_quote(s);
  }
  return s;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string f = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st;
    if (stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(f.c_str(), X_OK) == 0) return f;
  }
  return "";
}

bool running_as_root() { return ::geteuid() == 0; }

std::string mpirun_root_variables() {
  return running_as_root() ? "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " : "";
}

int physical_cores() {
  // Open MPI gives a node one slot per physical core: count the distinct (package, core) pairs.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, package;
  while (std::getline(cpuinfo, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") package = value;
    if (key == "core id") cores.insert({package, value});
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  const unsigned threads = std::thread::hardware_concurrency();
  return threads > 0 ? static_cast<int>(threads) : 1;
}

std::string launch_line(int processes, const std::string& arguments) {
  const std::string command = this_command() + " " + arguments;
  if (processes <= 1) return command;
  const std::string oversubscribe = processes > physical_cores() ? "--oversubscribe " : "";
  return mpirun_root_variables() + "mpirun -np " + std::to_string(processes) + " " + oversubscribe + command;
}

}  // namespace pf::cli
