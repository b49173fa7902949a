#include "runtime/core/limits.h"

#include <unistd.h>

namespace pf::limits {

int64_t max_parameter_bytes() {
  static const int64_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return int64_t{1} << 32;  // unknown: 4 GiB
    return static_cast<int64_t>(pages) / 4 * static_cast<int64_t>(page_size);
  }();
  return bytes;
}

}  // namespace pf::limits
