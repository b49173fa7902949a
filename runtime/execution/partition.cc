#include "runtime/execution/partition.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::exec {

namespace {

void check_stage_count(int num_layers, int num_stages) {
  PF_CHECK_ARG(num_stages >= 1, "partition: the number of stages must be >= 1, got ", num_stages);
  PF_CHECK_ARG(num_layers >= num_stages, "partition: ", num_stages, " stages need at least ", num_stages,
               " top-level layers, the model has ", num_layers);
}

}  // namespace

std::vector<StageRange> partition_layers(int num_layers, int num_stages,
                                         const std::vector<int>& layers_per_stage) {
  check_stage_count(num_layers, num_stages);
  std::vector<StageRange> out;
  if (layers_per_stage.empty()) {
    int begin = 0;
    for (int s = 0; s < num_stages; ++s) {
      const int n = num_layers / num_stages + (s < num_layers % num_stages ? 1 : 0);
      out.push_back({begin, begin + n});
      begin += n;
    }
    return out;
  }
  PF_CHECK_ARG(static_cast<int>(layers_per_stage.size()) == num_stages, "layers_per_stage has ",
               layers_per_stage.size(), " entries, the schedule has ", num_stages, " stages");
  int begin = 0;
  for (int s = 0; s < num_stages; ++s) {
    PF_CHECK_ARG(layers_per_stage[s] >= 1, "layers_per_stage[", s, "] must be >= 1, got ", layers_per_stage[s]);
    out.push_back({begin, begin + layers_per_stage[s]});
    begin += layers_per_stage[s];
  }
  PF_CHECK_ARG(begin == num_layers, "layers_per_stage sums to ", begin, ", the model has ", num_layers,
               " top-level layers");
  return out;
}

std::vector<StageRange> partition_balanced(const std::vector<double>& costs, int num_stages) {
  const int n = static_cast<int>(costs.size());
  PF_CHECK_ARG(num_stages >= 1 && n >= num_stages, "balanced partition: ", num_stages, " stages need at least ",
               num_stages, " layers, got ", n);
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) {
    PF_CHECK_ARG(costs[i] >= 0, "balanced partition: layer ", i, " has a negative cost");
    prefix[i + 1] = prefix[i] + costs[i];
  }
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the minimal slowest stage when the first i layers form s stages.
  std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(num_stages + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0.0;
  for (int s = 1; s <= num_stages; ++s) {
    for (int i = s; i <= n - (num_stages - s); ++i) {
      for (int j = s - 1; j < i; ++j) {
        if (best[s - 1][j] == inf) continue;
        const double v = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
    }
  }
  std::vector<StageRange> out(num_stages);
  int end = n;
  for (int s = num_stages; s >= 1; --s) {
    const int begin = cut[s][end];
    out[s - 1] = {begin, end};
    end = begin;
  }
  return out;
}

std::vector<int64_t> layer_parameter_counts(const Model& model) {
  std::vector<int64_t> out;
  for (const auto& layer : model.layers()) {
    int64_t n = 0;
    for (const Parameter* p : layer->parameters()) n += shape_numel(p->shape);
    out.push_back(n);
  }
  return out;
}

std::vector<StageRange> partition_by_parameters(const Model& model, int num_stages) {
  check_stage_count(static_cast<int>(model.layers().size()), num_stages);
  const std::vector<int64_t> counts = layer_parameter_counts(model);
  return partition_balanced(std::vector<double>(counts.begin(), counts.end()), num_stages);
}

std::vector<int> layer_counts(const std::vector<StageRange>& stages) {
  std::vector<int> out;
  for (const auto& s : stages) out.push_back(s.size());
  return out;
}

std::vector<double> measure_layer_times(Model& model, const Batch& sample, int repeats) {
  PF_CHECK_ARG(repeats >= 1, "measure_layer_times: repeats must be >= 1");
  using clock = std::chrono::steady_clock;
  const auto& layers = model.layers();
  const size_t n = layers.size();
  std::vector<std::vector<double>> runs(n);
  for (int r = 0; r < repeats; ++r) {
    std::vector<SavedContext> ctx(n);
    SavedContext loss_ctx;
    std::vector<double> t(n, 0.0);
    Tensor x = sample.inputs;
    {
      MemoryCategoryScope scope(MemoryCategory::kActivations);
      for (size_t i = 0; i < n; ++i) {
        const auto t0 = clock::now();
        x = layers[i]->forward(x, ctx[i]);
        if (i + 1 == n) model.loss().forward(x, sample.targets, 1.0f, loss_ctx);
        t[i] += std::chrono::duration<double>(clock::now() - t0).count();
      }
    }
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    auto t0 = clock::now();
    Tensor g = model.loss().backward(loss_ctx);
    t[n - 1] += std::chrono::duration<double>(clock::now() - t0).count();
    for (size_t i = n; i-- > 0;) {
      t0 = clock::now();
      g = layers[i]->backward(ctx[i], g);
      t[i] += std::chrono::duration<double>(clock::now() - t0).count();
    }
    for (size_t i = 0; i < n; ++i) runs[i].push_back(t[i]);
  }
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    std::sort(runs[i].begin(), runs[i].end());
    out[i] = runs[i][runs[i].size() / 2];
  }
  return out;
}

}  // namespace pf::exec
