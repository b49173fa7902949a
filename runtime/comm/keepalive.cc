#include "runtime/comm/keepalive.h"

#include <mutex>
#include <vector>

namespace pf::comm {

void keep_until_exit(std::shared_ptr<void> memory) {
  static std::mutex* mutex = new std::mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>;  // never destroyed: outlives MPI_Finalize
  std::lock_guard<std::mutex> lock(*mutex);
  kept->push_back(std::move(memory));
}

}  // namespace pf::comm
