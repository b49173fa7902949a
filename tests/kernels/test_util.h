// Shared helpers of the kernel tests: GPU skip, random data, comparison with tolerances.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/kernels/tolerances.h"

namespace pf::test {

// Skips the current test when this machine has no CUDA device.
#define PF_REQUIRE_GPU()                                                               \
  do {                                                                                 \
    const ::pf::CudaAvailability pf_avail_ = ::pf::probe_cuda();                       \
    if (pf_avail_.device_count == 0) GTEST_SKIP() << "no CUDA device: " << pf_avail_.reason; \
  } while (0)

inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t limit) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Every element within tolerance (see tolerances.h); reports the worst element.
inline ::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want,
                                            Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  double scale = 1.0;
  for (float w : want) scale = std::fmax(scale, std::fabs(static_cast<double>(w)));
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const double allowed = tol.abs * scale + tol.rel * std::fabs(w);
    const double err = std::fabs(g - w);
    if (!(err <= allowed)) {  // NaN fails
      ++bad;
      const double excess = std::isnan(err) ? 1e300 : err - allowed;
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements out of tolerance (rel "
                                       << tol.rel << ", abs " << tol.abs << " x " << scale << "); worst at "
                                       << worst << ": got " << got[worst] << ", want " << want[worst];
}

}  // namespace pf::test
