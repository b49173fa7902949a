#include "tools/cli/launch_line.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

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

std::string launch_line(int processes, const std::string& arguments) {
  const std::string command = this_command() + " " + arguments;
  if (processes <= 1) return command;
  return mpirun_root_variables() + "mpirun -np " + std::to_string(processes) + " " + command;
}

}  // namespace pf::cli
