// Memory that MPI may still read or write after its owner has given up on the request: a send to a
// peer that never receives, a receive whose cancellation did not finish, a collective given up on
// (MPI can neither cancel nor free those). It is kept until the process exits, still reachable, so
// it is never freed under MPI's feet and leak checkers do not report it.
#pragma once

#include <memory>

namespace pf::comm {

void keep_until_exit(std::shared_ptr<void> memory);

}  // namespace pf::comm
