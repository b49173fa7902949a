// Whether this CPU can run this build. The default build targets x86-64-v3 (AVX2, FMA, BMI2, ...:
// .bazelrc); `--config=portable` builds for any x86-64. A CPU without a feature the build needs
// would die of SIGILL somewhere inside the library, so this library (compiled for baseline x86-64,
// whatever the build's flags) checks first: at load time it writes cpu_support_problem() to stderr,
// and the command line refuses to start with it.
#pragma once

#include <string>
#include <vector>

namespace pf {

// The ISA features the rest of the build was compiled to use (from the compiler's macros there),
// e.g. {"avx", "avx2", "fma", "bmi", "bmi2", "f16c", nullptr}; just {nullptr} for a portable build.
const char* const* build_required_cpu_feature_list();
std::vector<std::string> build_required_cpu_features();

// "" when `has(feature)` holds for every required feature; otherwise the message naming the missing
// ones and the fix, e.g. "PipeForge was built for x86-64-v3 and this CPU lacks avx2, fma; rebuild it
// with `bazel build --config=portable ...` (docs/BUILD.md)".
std::string cpu_support_problem(const std::vector<std::string>& required, bool (*has)(const char* feature));

// The same for this machine's CPU (cpuid through __builtin_cpu_supports).
std::string cpu_support_problem();
// Whether this CPU has every required feature; plain C inside, safe to call first thing in main().
bool cpu_supported();

}  // namespace pf
