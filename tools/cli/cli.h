// The `pipeforge` command line: subcommands over the runtime (`train`, `schedule`, `simulate`).
// Exit codes: 0 success, 1 a runtime failure, 2 bad usage (unknown or invalid options, unreadable
// inputs), with a one-line message on stderr.
#pragma once

namespace pf::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

int run(int argc, char** argv);

}  // namespace pf::cli
