// See fuzz_support.h.
#include "tests/fuzz/fuzz_support.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "runtime/core/log.h"

namespace pf::fuzz {

void finding(const char* target, const std::string& what) {
  // Inputs carry NULs and control bytes; print them escaped so the message stays whole.
  std::string shown;
  for (unsigned char c : what) {
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      shown += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      shown += hex;
    }
  }
  std::fprintf(stderr, "\nFUZZ FINDING (%s): %s\n", target, shown.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string make_work_dir(const char* target) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  if (!tmp) tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp ? tmp : "/tmp") + "/pf_" + target + "_fuzz.XXXXXX";
  if (!::mkdtemp(pattern.data())) finding(target, "harness: mkdtemp failed for " + pattern);
  return pattern;
}

void quiet_runtime_log() { set_log_sink([](LogLevel, const std::string&) {}, LogLevel::kOff); }

}  // namespace pf::fuzz
