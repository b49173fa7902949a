// The median of a few measurements (the upper one of the middle two for an even count; 0 for
// none): what the planner, its calibration and the process probe take of repeated timings.
#pragma once

#include <algorithm>
#include <vector>

namespace pf {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace pf
