#include "runtime/comm/mpi_launch.h"

#include <cstdlib>

namespace pf::comm {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

}  // namespace pf::comm
