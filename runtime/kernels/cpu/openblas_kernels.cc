#include "runtime/kernels/cpu/openblas_kernels.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>

// DYNAMIC_ARCH OpenBLAS only: weak, so a build without them still links (the choice is then left
// alone).
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace pf::cpu {

namespace {

std::string& chosen_fallback() {
  static std::string name;
  return name;
}

std::string current_core() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

const char* core_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

void choose_blas_kernels_again_if_generic() {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* keep = std::getenv("PF_KEEP_OPENBLAS_KERNELS");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  const std::string core = current_core();
  if (strcasecmp(core.c_str(), "Prescott") != 0) return;
  const char* better = core_for_this_cpu();
  if (better == nullptr) return;
  setenv("OPENBLAS_CORETYPE", better, 0);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");  // children choose for themselves
  chosen_fallback() = core;
}

BlasKernels blas_kernels() { return {current_core(), chosen_fallback()}; }

}  // namespace pf::cpu
