#include "runtime/core/limits.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace pf::limits {
namespace {

// The memory this process may use: physical memory, or less when a cgroup (v2) limits it, as in
// a container (where _SC_PHYS_PAGES reports the host's memory). 0 when unknown.
int64_t usable_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  int64_t bytes = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");
  std::string text;
  if (cgroup >> text && !text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
      text.size() < 19) {
    const int64_t cap = std::stoll(text);
    if (cap > 0) bytes = bytes > 0 ? std::min(bytes, cap) : cap;
  }
  return bytes;
}

}  // namespace

int64_t max_parameter_bytes() {
  static const int64_t bytes = [] {
    const int64_t usable = usable_memory_bytes();
    return usable > 0 ? usable / 4 : int64_t{1} << 32;  // unknown: 4 GiB
  }();
  return bytes;
}

int64_t max_message_bytes() {
  static const int64_t bytes = [] {
    const int64_t usable = usable_memory_bytes();
    return usable > 0 ? usable / 2 : int64_t{1} << 33;  // unknown: 8 GiB
  }();
  return bytes;
}

}  // namespace pf::limits
