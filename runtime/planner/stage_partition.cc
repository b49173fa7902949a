#include "runtime/planner/stage_partition.h"

#include <algorithm>
#include <limits>

#include "runtime/core/error.h"

namespace pf::plan {

StageCosts stage_costs(const MicroBatchCosts& costs, int begin, int end) {
  PF_CHECK_ARG(0 <= begin && begin < end && end <= static_cast<int>(costs.layers.size()), "stage layers [", begin,
               ", ", end, ") are not inside the ", costs.layers.size(), " layers");
  StageCosts s;
  for (int i = begin; i < end; ++i) {
    const LayerCosts& l = costs.layers[static_cast<size_t>(i)];
    s.forward_s += l.forward_s;
    s.backward_input_s += l.backward_input_s;
    s.backward_weight_s += l.backward_weight_s;
    s.tensor_parallel_forward_s += l.tensor_parallel_forward_s;
    s.tensor_parallel_backward_s += l.tensor_parallel_backward_s;
    s.activation_bytes += static_cast<double>(l.activation_bytes - (i > begin ? l.shared_with_previous_bytes : 0));
    s.weight_pending_bytes += static_cast<double>(l.weight_pending_bytes);
    s.parameters += l.parameters;
  }
  s.input_bytes = static_cast<double>(costs.layers[static_cast<size_t>(begin)].input_bytes);
  return s;
}

std::vector<int> partition_for_plan(const MicroBatchCosts& costs, int num_stages, const PartitionLimits& limits) {
  const int n = static_cast<int>(costs.layers.size());
  if (num_stages < 1 || n < num_stages) return {};
  PF_CHECK_ARG(limits.contexts.empty() || static_cast<int>(limits.contexts.size()) == num_stages,
               "partition: ", limits.contexts.size(), " context counts for ", num_stages, " stages");
  PF_CHECK_ARG(limits.stage_time_factor.empty() || static_cast<int>(limits.stage_time_factor.size()) == num_stages,
               "partition: ", limits.stage_time_factor.size(), " time factors for ", num_stages, " stages");
  const double inf = std::numeric_limits<double>::infinity();
  auto seconds = [&](int stage, int begin, int end) {
    const double k = limits.stage_time_factor.empty() ? 1.0 : limits.stage_time_factor[static_cast<size_t>(stage)];
    return k * stage_costs(costs, begin, end).seconds();
  };
  auto fits = [&](int stage, int begin, int end) {
    if (limits.contexts.empty() || limits.stage_limit_bytes <= 0) return true;
    const StageCosts c = stage_costs(costs, begin, end);
    const double bytes = static_cast<double>(c.parameters) * limits.bytes_per_parameter +
                         limits.contexts[static_cast<size_t>(stage)] * c.activation_bytes;
    return bytes <= limits.stage_limit_bytes;
  };
  // best[s][i]: the smallest slowest-stage time of layers [0, i) in s + 1 stages; cut[s][i] its last cut.
  std::vector<std::vector<double>> best(static_cast<size_t>(num_stages), std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(static_cast<size_t>(num_stages), std::vector<int>(n + 1, -1));
  for (int i = 1; i <= n; ++i)
    if (fits(0, 0, i)) best[0][i] = seconds(0, 0, i);
  for (int s = 1; s < num_stages; ++s) {
    for (int i = s + 1; i <= n; ++i) {
      for (int j = s; j < i; ++j) {
        if (best[s - 1][j] == inf || !fits(s, j, i)) continue;
        const double t = std::max(best[s - 1][j], seconds(s, j, i));
        if (t < best[s][i]) {
          best[s][i] = t;
          cut[s][i] = j;
        }
      }
    }
  }
  if (best[num_stages - 1][n] == inf) return {};
  std::vector<int> counts(static_cast<size_t>(num_stages));
  int end = n;
  for (int s = num_stages - 1; s >= 0; --s) {
    const int begin = s == 0 ? 0 : cut[s][end];
    counts[static_cast<size_t>(s)] = end - begin;
    end = begin;
  }
  return counts;
}

}  // namespace pf::plan
