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

void append(char* out, size_t size, const char* text) { std::strncat(out, text, size - std::strlen(out) - 1); }

// The problem for the nullptr-terminated `required` list, written into `out` ("" when none). Plain
// C only, so that the load-time check can use it: an inline C++ function here could be the copy the
// linker took from a file compiled for the build's ISA.
void write_problem(const char* const* required, bool (*has)(const char*), char* out, size_t size) {
  out[0] = '\0';
  bool missing = false;
  for (const char* const* f = required; *f != nullptr; ++f) {
    if (has(*f)) continue;
    append(out, size, missing ? ", " : "PipeForge was built for x86-64-v3 and this CPU lacks ");
    append(out, size, *f);
    missing = true;
  }
  if (missing) append(out, size, "; rebuild it with `bazel build --config=portable ...` (docs/BUILD.md, \"Portable builds\")");
}

// At load time, before anything compiled for the build's ISA can hit an illegal instruction: one line
// on stderr.
__attribute__((constructor(101))) void warn_on_unsupported_cpu() {
  char line[512] = "pipeforge: ";
  const size_t prefix = std::strlen(line);
  write_problem(build_required_cpu_feature_list(), cpu_has, line + prefix, sizeof(line) - prefix - 1);
  if (line[prefix] == '\0') return;
  append(line, sizeof(line), "\n");
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

std::string cpu_support_problem(const std::vector<std::string>& required, bool (*has)(const char* feature)) {
  std::vector<const char*> list;
  for (const std::string& feature : required) list.push_back(feature.c_str());
  list.push_back(nullptr);
  char problem[1024];
  write_problem(list.data(), has, problem, sizeof(problem));
  return problem;
}

std::string cpu_support_problem() { return cpu_support_problem(build_required_cpu_features(), cpu_has); }

}  // namespace pf
