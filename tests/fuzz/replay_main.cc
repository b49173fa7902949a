// main() for the fuzz targets outside libFuzzer (gcc builds, the regression tests): runs
// LLVMFuzzerTestOneInput once on every file named on the command line or found under a named
// folder, in sorted order, printing each path first, so a failing test's log ends with the input
// that crashed. Limits like tools/fuzz.sh's: an input after which the peak RSS is above 2 GiB fails
// (libFuzzer's -rss_limit_mb=2048), one that runs longer than 20 s is killed (SIGALRM), and the data
// segment is capped at 4 GiB so an input that allocates without limit fails fast instead of
// exhausting the machine (not under sanitizers, whose shadow memory the cap would break).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PF_REPLAY_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define PF_REPLAY_SANITIZED 1
#endif
#endif

namespace {

constexpr rlim_t kMemoryLimitBytes = rlim_t{4} << 30;
constexpr long kRssLimitKiB = long{2} << 20;
constexpr unsigned kSecondsPerInput = 20;

bool is_input(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return std::filesystem::is_regular_file(p) && !name.empty() && name[0] != '.' && name.rfind("README", 0) != 0;
}

}  // namespace

int main(int argc, char** argv) {
#ifndef PF_REPLAY_SANITIZED
  const rlimit limit{kMemoryLimitBytes, kMemoryLimitBytes};
  setrlimit(RLIMIT_DATA, &limit);
#endif
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (is_input(entry.path())) inputs.push_back(entry.path().string());
      }
    } else if (is_input(arg)) {
      inputs.push_back(arg.string());
    } else {
      std::fprintf(stderr, "replay: skipping '%s' (no such file or folder)\n", argv[i]);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
    alarm(kSecondsPerInput);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    alarm(0);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    if (usage.ru_maxrss > kRssLimitKiB) {
      std::fprintf(stderr, "replay: %s took the peak RSS to %ld MiB, over the limit of %ld MiB\n", path.c_str(),
                   usage.ru_maxrss >> 10, kRssLimitKiB >> 10);
      return 1;
    }
  }
  std::fprintf(stderr, "replay: %zu inputs, no finding\n", inputs.size());
  return 0;
}
