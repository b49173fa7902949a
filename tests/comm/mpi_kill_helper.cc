// Launched by tests/comm/mpi_test.sh: rank 1 kills itself with SIGKILL while the others wait for a
// message from it. The script checks that mpirun then ends the job with a failure within a bound
// and that no process is left behind. Each rank writes its pid to $PF_PID_DIR/<rank>.pid first.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/comm/mpi_world.h"
#include "runtime/core/error.h"

int main() {
  try {
    auto world = pf::comm::MpiWorld::world();
    const char* dir = std::getenv("PF_PID_DIR");
    if (dir != nullptr) {
      const std::string path = std::string(dir) + "/" + std::to_string(world->rank()) + ".pid";
      if (FILE* f = std::fopen(path.c_str(), "w")) {
        std::fprintf(f, "%d\n", static_cast<int>(getpid()));
        std::fclose(f);
      }
    }
    world->barrier(30.0);
    if (world->rank() == 1) raise(SIGKILL);
    world->endpoint().recv(1, pf::comm::MessageKey{pf::comm::MessageKind::kActivation, 0, 1}, 60.0);
    std::fprintf(stderr, "rank %d: received a message from a killed rank\n", world->rank());
    return 2;
  } catch (const pf::Error& e) {
    // What a rank sees of a dead peer, when the launcher does not end the job first.
    std::fprintf(stderr, "mpi_kill_helper: %s\n", e.what());
    return 3;
  }
}
