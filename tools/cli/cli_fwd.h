// The CLI11 types the command headers name, pointers and references only. A file that defines
// options includes <CLI/CLI.hpp> itself; one that only runs a command (train_command.cc,
// train_report.cc, ...) does not parse CLI11, which costs about 7 s per file (13 s under ASan).
#pragma once

namespace CLI {
class App;
class Option;
}  // namespace CLI
