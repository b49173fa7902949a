// Ctrl-C (SIGINT) and SIGTERM while `pipeforge train` runs: the first asks the run to stop after
// the step in progress (the loop then writes the configured checkpoint and says where); a second
// ends the process at once, as without the guard. Under mpirun every process installs it and the
// processes agree on stopping by a reduction after each step (train_command.cc). A signal that was
// ignored when the run started (a background command of a shell without job control) stays ignored.
#pragma once

namespace pf::cli {

class InterruptGuard {
 public:
  // Installs the handlers; `announce`: the first signal prints one line on stderr (the leader).
  explicit InterruptGuard(bool announce);
  // Restores the handlers that were there before.
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // SIGINT or SIGTERM once one arrived while a guard was installed, else 0.
  static int signal_received();
};

// "SIGINT", "SIGTERM" or "signal N".
const char* signal_name(int signal);

}  // namespace pf::cli
