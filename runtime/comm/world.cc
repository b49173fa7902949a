#include "runtime/comm/world.h"

#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"

namespace pf::comm {

namespace {
template <typename T>
std::vector<T> gather_values(World& world, const std::vector<T>& mine, double timeout_seconds) {
  const std::vector<char> bytes = world.all_gather(mine.data(), mine.size() * sizeof(T), timeout_seconds);
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}
}  // namespace

std::vector<double> all_gather_doubles(World& world, const std::vector<double>& mine, double timeout_seconds) {
  return gather_values(world, mine, timeout_seconds);
}

std::vector<int64_t> all_gather_int64s(World& world, const std::vector<int64_t>& mine, double timeout_seconds) {
  return gather_values(world, mine, timeout_seconds);
}

void broadcast_string(World& world, std::string* text, int root, double timeout_seconds) {
  PF_CHECK_ARG(text != nullptr, "broadcast_string: text is null");
  uint64_t length = text->size();
  world.broadcast(&length, sizeof(length), root, timeout_seconds);
  if (length > static_cast<uint64_t>(limits::max_message_bytes())) {
    fail(ErrorCode::kDataLoss, "rank ", world.rank(), ": broadcast_string: rank ", root, " announced ", length,
         " bytes, more than the limit of ", limits::max_message_bytes());
  }
  if (world.rank() != root) text->assign(length, '\0');
  world.broadcast(text->data(), length, root, timeout_seconds);
}

}  // namespace pf::comm
