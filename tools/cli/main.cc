#include <unistd.h>

#include <cstdlib>

#include "runtime/cpu_check/cpu_check.h"
#include "tools/cli/cli.h"

int main(int argc, char** argv) {
  // A CPU without the build's ISA: the load-time check has printed why; stop before crashing.
  if (!pf::cpu_supported()) return pf::cli::kExitFailure;
  // Under `bazel run` the working directory is the runfiles tree; relative paths the user typed
  // (--data, --checkpoint, --resume) mean the folder they ran bazel from.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY")) {
    if (chdir(dir) != 0) return pf::cli::kExitFailure;
  }
  return pf::cli::run(argc, argv);
}
