// Compiled with the build's own ISA flags (unlike the rest of this library), so its macros say what
// the build uses. It only returns a static array of names: no instruction of those sets runs here.
#include "runtime/cpu_check/cpu_check.h"

namespace pf {

const char* const* build_required_cpu_feature_list() {
  static const char* const features[] = {
#ifdef __AVX__
      "avx",
#endif
#ifdef __AVX2__
      "avx2",
#endif
#ifdef __FMA__
      "fma",
#endif
#ifdef __BMI__
      "bmi",
#endif
#ifdef __BMI2__
      "bmi2",
#endif
#ifdef __F16C__
      "f16c",
#endif
#ifdef __AVX512F__
      "avx512f",
#endif
      nullptr,
  };
  return features;
}

}  // namespace pf
