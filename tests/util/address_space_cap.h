// Caps this process's address space (RLIMIT_AS) for a scope, so that an allocation the code under
// test should never make fails (and the test with it) instead of succeeding silently on a large
// machine. Not under ASan or TSan (tools/sanitize.sh), whose shadow memory already takes terabytes
// of address space: any cap would make their own mappings fail, so there the cap does nothing.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>

#include <unistd.h>

namespace pftest {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kAddressSpaceCapWorks = false;
#else
constexpr bool kAddressSpaceCapWorks = true;
#endif

// The address space this process maps now, in bytes.
inline int64_t address_space_in_use() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  statm >> pages;
  return pages * ::sysconf(_SC_PAGESIZE);
}

class AddressSpaceCap {
 public:
  // Lowers the soft limit to `bytes` (never raises it); restored when the object goes.
  explicit AddressSpaceCap(int64_t bytes) {
    if (!kAddressSpaceCapWorks) return;
    ::getrlimit(RLIMIT_AS, &saved_);
    struct rlimit cap = saved_;
    cap.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, static_cast<rlim_t>(bytes));
    ::setrlimit(RLIMIT_AS, &cap);
  }
  ~AddressSpaceCap() {
    if (kAddressSpaceCapWorks) ::setrlimit(RLIMIT_AS, &saved_);
  }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  struct rlimit saved_ {};
};

}  // namespace pftest
