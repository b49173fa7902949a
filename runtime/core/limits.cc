#include "runtime/core/limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace pf::limits {
namespace {

// The address-space limit (`ulimit -v`, RLIMIT_AS); 0 when there is none.
int64_t address_space_limit_bytes() {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return limit.rlim_cur > static_cast<rlim_t>(INT64_MAX) ? 0 : static_cast<int64_t>(limit.rlim_cur);
}

// The address space this process holds now (/proc/self/statm's first field); 0 when unknown.
int64_t address_space_used_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (!(statm >> pages) || pages < 0 || page_size <= 0) return 0;
  return pages * page_size;
}

// The memory this process may use: physical memory, or less when a cgroup (v2) limits it, as in
// a container (where _SC_PHYS_PAGES reports the host's memory), or an address-space limit is set.
// 0 when unknown.
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
  const int64_t address_space = address_space_limit_bytes();
  if (address_space > 0) bytes = bytes > 0 ? std::min(bytes, address_space) : address_space;
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

int64_t max_loaded_data_bytes() {
  int64_t usable = usable_memory_bytes();
  if (usable <= 0) return int64_t{1} << 32;  // unknown: 4 GiB
  if (address_space_limit_bytes() > 0) {
    // Under `ulimit -v` what the process already maps counts against the limit.
    usable = std::min(usable, std::max<int64_t>(0, address_space_limit_bytes() - address_space_used_bytes()));
  }
  return usable / 2;
}

int64_t max_message_bytes() {
  static const int64_t bytes = [] {
    const int64_t usable = usable_memory_bytes();
    return usable > 0 ? usable / 2 : int64_t{1} << 33;  // unknown: 8 GiB
  }();
  return bytes;
}

}  // namespace pf::limits
