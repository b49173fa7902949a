// What each member says it is doing when it enters a collective (operation, size, root). Both
// worlds compare the members' signatures before moving any data, so members that disagree fail
// together with a message naming the rank that differs, instead of exchanging the wrong bytes or
// hanging.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pf::comm {

enum class CollectiveOp : int64_t {
  kBarrier = 1,
  kAllGather = 2,
  kBroadcast = 3,
  kAllReduceF32 = 4,
  kAllReduceF64 = 5,
  kSplit = 6,
  kReduceScatterF32 = 7,
};
const char* collective_op_name(CollectiveOp op);

struct CollectiveSignature {
  int64_t op = 0;    // a CollectiveOp
  int64_t size = 0;  // bytes (all_gather, broadcast) or elements (all_reduce_sum)
  int64_t root = 0;  // broadcast's root; 0 otherwise
};
static_assert(sizeof(CollectiveSignature) == 24, "sent as bytes between processes");

// Empty when every signature agrees; otherwise what differs, e.g. "rank 2 contributes 4 bytes
// where the others contribute 8" (the majority's value is the reference; ties: rank 0's).
std::string signature_mismatch(const std::vector<CollectiveSignature>& signatures);

}  // namespace pf::comm
