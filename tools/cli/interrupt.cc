#include "tools/cli/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace pf::cli {
namespace {

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_announce = 0;
struct sigaction g_previous_int, g_previous_term;

void on_signal(int signal) {
  if (g_signal != 0) {
    // The second: stop now, as the signal would without us.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  g_signal = signal;
  if (g_announce) {
    static const char kMessage[] =
        "\npipeforge train: stopping after this step (a checkpoint is written if one is configured); "
        "interrupt again to stop at once\n";
    const ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
  }
}

}  // namespace

InterruptGuard::InterruptGuard(bool announce) {
  g_signal = 0;
  g_announce = announce ? 1 : 0;
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write in progress goes on; the loop checks after the step
  // A signal ignored when we start stays ignored: a shell without job control starts background
  // commands with SIGINT ignored, so that a Ctrl-C meant for the foreground does not reach them.
  ::sigaction(SIGINT, nullptr, &g_previous_int);
  ::sigaction(SIGTERM, nullptr, &g_previous_term);
  if (g_previous_int.sa_handler != SIG_IGN) ::sigaction(SIGINT, &action, nullptr);
  if (g_previous_term.sa_handler != SIG_IGN) ::sigaction(SIGTERM, &action, nullptr);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int InterruptGuard::signal_received() { return g_signal; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace pf::cli
