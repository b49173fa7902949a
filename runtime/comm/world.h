// A process group: the members of one training job (ranks), their point-to-point endpoints and the
// collectives they run together. Every executor talks to its peers through a World: ThreadWorld
// (members are threads of one process) or MpiWorld (one process per member). docs/COMM.md.
//
// Contract shared by every implementation:
// - Every blocking call takes a timeout in seconds and throws pf::Error kTimeout when it passes;
//   nothing waits forever.
// - Collectives are called by every member in the same order with the same sizes (and the same
//   root); a member whose sizes, root or operation differ makes the call throw kInvalidArgument on
//   every member, naming the rank that differs.
// - abort(reason) marks this member failed and tells the others; from then on their waits and calls
//   (recv, send, collectives) throw kCancelled naming the failed rank and the reason, e.g.
//   "rank 2: 2RECV_F5 (peer rank 1) cancelled: rank 1 failed: <reason>". An aborted world stays
//   aborted (ThreadWorld::reset() makes a thread group usable again).
// - One World object is used by one member; its collectives may run on one thread while other
//   threads of the same member use endpoint().
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/comm/transport.h"

namespace pf::comm {

class World {
 public:
  virtual ~World() = default;
  virtual int rank() const = 0;  // this member's rank in [0, size())
  virtual int size() const = 0;
  // E.g. "MPI rank 1 of 4 (host h, pid 123)" or "thread rank 1 of 4".
  virtual std::string describe() const = 0;
  // The point-to-point endpoint of this member: endpoint().rank() == rank().
  virtual Transport& endpoint() = 0;
  virtual void barrier(double timeout_seconds) = 0;
  // Every member contributes `bytes` bytes; returns size() * bytes bytes, member r's block at
  // r * bytes, the same on every member.
  virtual std::vector<char> all_gather(const void* data, size_t bytes, double timeout_seconds) = 0;
  // Root's `bytes` bytes end up in every member's `data`.
  virtual void broadcast(void* data, size_t bytes, int root, double timeout_seconds) = 0;
  // Element-wise sum over the members, the result in every member's `data`. The same bits on every
  // member; deterministic for a fixed world size and layout (MPI: the library's reduction order).
  virtual void all_reduce_sum(float* data, size_t count, double timeout_seconds) = 0;
  virtual void all_reduce_sum(double* data, size_t count, double timeout_seconds) = 0;
  // Reduce-scatter: `data` holds size() blocks of `count` floats; member r's `mine` (count floats)
  // gets the element-wise sum over the members of their block r. Each element is summed as
  // all_reduce_sum sums it. This default all-reduces the whole (threads: the same memory);
  // MpiWorld moves 1/size() of it (MPI_Ireduce_scatter_block). (Defined here: World keeps no key
  // function, so every library that sees it has its type information, as before.)
  virtual void reduce_scatter_sum(const float* data, size_t count, float* mine, double timeout_seconds) {
    std::vector<float> all(data, data + count * static_cast<size_t>(size()));
    all_reduce_sum(all.data(), all.size(), timeout_seconds);
    if (count > 0) std::memcpy(mine, all.data() + count * static_cast<size_t>(rank()), count * sizeof(float));
  }
  // This member failed: tells every other member (best effort, never blocks long).
  virtual void abort(const std::string& reason) = 0;
  // This member called abort() or learned that another member did.
  virtual bool aborted() const = 0;
  // Why, once aborted(): "rank 1 failed: <reason>" ("" before).
  virtual std::string abort_cause() const = 0;
};

// Helpers on top of the collectives. Every member calls them with the same sizes.
// size() * mine.size() values, member r's at r * mine.size().
std::vector<double> all_gather_doubles(World& world, const std::vector<double>& mine, double timeout_seconds);
std::vector<int64_t> all_gather_int64s(World& world, const std::vector<int64_t>& mine, double timeout_seconds);
// Root's `*text` in every member's `*text` (members' own lengths may differ).
void broadcast_string(World& world, std::string* text, int root, double timeout_seconds);

}  // namespace pf::comm
