#include "runtime/cpu_check/cpu_check.h"

#include <unistd.h>

#include <cstring>

namespace pf {
namespace {

bool cpu_has(const char* feature) {
  __builtin_cpu_init();
  if (std::strcmp(feature, "avx") == 0) return __builtin_cpu_supports("avx");
  if (std::strcmp(feature, "avx2") == 0) return __builtin_cpu_supports("avx2");
  if (std::strcmp(feature, "fma") == 0) return __builtin_cpu_supports("fma");
  if (std::strcmp(feature, "bmi") == 0) return __builtin_cpu_supports("bmi");
  if (std::strcmp(feature, "bmi2") == 0) return __builtin_cpu_supports("bmi2");
  if (std::strcmp(feature, "f16c") == 0) return __builtin_cpu_supports("f16c");
  if (std::strcmp(feature, "avx512f") == 0) return __builtin_cpu_supports("avx512f");
  return false;  // a feature this check does not know: say so rather than crash later
}

constexpr char kFix[] = "; rebuild it with `bazel build --config=portable ...` (docs/BUILD.md, \"Portable builds\")";

// At load time, before anything compiled for the build's ISA can hit an illegal instruction: one line
// on stderr. Plain C only: an inline C++ function here could be the copy the linker took from a file
// compiled for the build's ISA.
__attribute__((constructor(101))) void warn_on_unsupported_cpu() {
  if (cpu_supported()) return;
  char line[512] = "pipeforge: PipeForge was built for x86-64-v3 and this CPU lacks ";
  bool missing = false;
  for (const char* const* f = build_required_cpu_feature_list(); *f != nullptr; ++f) {
    if (cpu_has(*f)) continue;
    if (missing) std::strncat(line, ", ", sizeof(line) - std::strlen(line) - 1);
    std::strncat(line, *f, sizeof(line) - std::strlen(line) - 1);
    missing = true;
  }
  std::strncat(line, kFix, sizeof(line) - std::strlen(line) - 1);
  std::strncat(line, "\n", sizeof(line) - std::strlen(line) - 1);
  ssize_t ignored = write(2, line, std::strlen(line));
  (void)ignored;
}

}  // namespace

bool cpu_supported() {
  for (const char* const* f = build_required_cpu_feature_list(); *f != nullptr; ++f) {
    if (!cpu_has(*f)) return false;
  }
  return true;
}

std::vector<std::string> build_required_cpu_features() {
  std::vector<std::string> features;
  for (const char* const* f = build_required_cpu_feature_list(); *f != nullptr; ++f) features.emplace_back(*f);
  return features;
}

std::string cpu_support_problem(const std::vector<std::string>& required, bool (*has)(const std::string& feature)) {
  std::string missing;
  for (const std::string& feature : required) {
    if (!has(feature)) missing += (missing.empty() ? "" : ", ") + feature;
  }
  if (missing.empty()) return "";
  return "PipeForge was built for x86-64-v3 and this CPU lacks " + missing + kFix;
}

std::string cpu_support_problem() {
  return cpu_support_problem(build_required_cpu_features(), [](const std::string& f) { return cpu_has(f.c_str()); });
}

}  // namespace pf
