#include "runtime/gpu_model/cluster_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/schedules/generators.h"

namespace pf::gpu {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string describe(const StepRequest& r, const StepPrediction& p) {
  char text[160];
  std::snprintf(text, sizeof text, "T=%d P=%d D=%d %s v=%d b=%lld %s%s", r.grid.tensor, r.grid.pipeline, r.grid.data,
                p.schedule.c_str(), r.chunks, static_cast<long long>(r.micro_batch),
                recompute_name(r.recompute), r.sequence_parallel ? " sp" : "");
  return text;
}

}  // namespace

bool is_gpu_cluster(const nlohmann::json& value) { return value.is_object() && value.contains("gpu"); }

GpuCluster gpu_cluster_from_json(const nlohmann::json& value, const std::string& where) {
  try {
    JsonObject top(value, "");
    GpuCluster c;
    const nlohmann::json& gpu = top.get("gpu");
    if (gpu.is_string()) {
      c.system = gpu_preset(gpu.get<std::string>());
    } else {
      PF_CHECK_ARG(gpu.is_object(), top.path_of("gpu"), ": a preset's name or an object in the presets' format");
      c.system = gpu_system_from_json(gpu, "in gpu");
    }
    c.nodes = static_cast<int>(top.get_int_in("nodes", 1, 1 << 20));
    nlohmann::json system = gpu_system_to_json(c.system);
    if (top.has("gpus_per_node")) system["node"]["gpus"] = top.get_int_in("gpus_per_node", 1, 1 << 10);
    for (const char* part : {"node", "network"}) {
      if (!top.has(part)) continue;
      const nlohmann::json& over = top.get(part);
      PF_CHECK_ARG(over.is_object(), top.path_of(part), ": expected an object");
      for (const auto& [key, v] : over.items()) system[part][key] = v;
    }
    c.system = gpu_system_from_json(system, "the cluster's GPU system");
    c.slowest_gpu_speed = top.get_number("slowest_gpu_speed", 1.0);
    PF_CHECK_ARG(std::isfinite(c.slowest_gpu_speed) && c.slowest_gpu_speed > 0 && c.slowest_gpu_speed <= 1,
                 top.path_of("slowest_gpu_speed"), ": ", c.slowest_gpu_speed, " is not in (0, 1]");
    top.reject_unknown();
    PF_CHECK_ARG(static_cast<int64_t>(c.nodes) * c.system.gpus_per_node <= (1 << 20), top.path_of("nodes"),
                 ": more than 2^20 GPUs");
    return c;
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
}

ClusterPlan search_cluster(const ClusterSearch& s) {
  const auto t0 = std::chrono::steady_clock::now();
  PF_CHECK_ARG(s.global_batch >= 1, "the global batch must be >= 1");
  PF_CHECK_ARG(s.top >= 1, "top must be >= 1");
  const std::vector<std::string> schedules =
      s.schedules.empty() ? std::vector<std::string>{"1f1b", "interleaved-1f1b", "zb-h1", "zb-v"} : s.schedules;
  const std::vector<Recompute> recomputes =
      s.recomputes.empty() ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull}
                           : s.recomputes;
  const std::vector<int64_t> micro_batches = s.micro_batches.empty() ? std::vector<int64_t>{1, 2, 4, 8} : s.micro_batches;
  const int gpus = s.cluster.gpus();
  ClusterPlan plan;
  struct Bounded {
    double step_bound;
    StepRequest request;
  };
  std::vector<Bounded> queue;
  StepRequest base;
  base.system = s.cluster.system;
  base.model = s.model;
  base.global_batch = s.global_batch;
  base.precision = s.precision;
  base.attention = s.attention;
  base.slowest_gpu_speed = s.cluster.slowest_gpu_speed;
  const double usable = static_cast<double>(s.cluster.system.usable_memory_bytes());
  auto refuse = [&plan](const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw e;
    ++plan.refused;
    if (plan.first_refusal.empty()) plan.first_refusal = e.what();
  };
  for (int T : divisors(gpus)) {
    if (s.model.heads % T != 0 || (!s.tensor_across_nodes && T > s.cluster.system.gpus_per_node)) continue;
    for (int P : divisors(gpus / T)) {
      if (P > s.model.layers) continue;
      const int D = gpus / (T * P);
      for (int64_t b : micro_batches) {
        if (s.global_batch % (b * D) != 0) continue;
        for (const std::string& name : schedules) {
          const sched::ScheduleTraits traits = sched::schedule_traits(name);
          std::vector<int> chunk_options{1};
          if (traits.chunks == sched::ChunkRule::kAny) {
            chunk_options.clear();
            for (int v = 2; v <= s.max_chunks; ++v) chunk_options.push_back(v);
          } else if (traits.chunks == sched::ChunkRule::kTwo) {
            chunk_options = {2};
          }
          // One rank runs every schedule alike: the first schedule stands for all.
          if (P == 1 && name != schedules.front()) continue;
          for (int v : chunk_options) {
            if (P == 1 && v > 1) continue;
            for (Recompute rc : recomputes) {
              // Fused attention keeps no scores: selective recompute has nothing to drop.
              if (rc == Recompute::kSelective && s.attention == Attention::kFlash) continue;
              for (bool sp : {false, true}) {
                if (sp && T == 1) continue;
                StepRequest r = base;
                r.grid = {T, P, D};
                r.chunks = v;
                r.schedule = name;
                r.micro_batch = b;
                r.recompute = rc;
                r.sequence_parallel = sp;
                ++plan.candidates;
                try {
                  const StepBounds bounds = step_bounds(r);
                  if (bounds.memory_per_gpu_bytes > usable) {
                    ++plan.too_big;
                    continue;
                  }
                  queue.push_back({bounds.step_seconds, std::move(r)});
                } catch (const Error& e) {
                  refuse(e);
                }
              }
            }
          }
        }
      }
    }
  }
  std::stable_sort(queue.begin(), queue.end(),
                   [](const Bounded& a, const Bounded& b) { return a.step_bound < b.step_bound; });
  for (size_t i = 0; i < queue.size(); ++i) {
    if (plan.ranked.size() >= s.top && queue[i].step_bound >= plan.ranked.back().second.step_seconds) {
      plan.pruned += static_cast<int64_t>(queue.size() - i);
      break;
    }
    try {
      ++plan.simulated;
      StepPrediction p = predict_step(queue[i].request);
      if (!p.fits) {
        ++plan.too_big;
        continue;
      }
      auto at = std::upper_bound(plan.ranked.begin(), plan.ranked.end(), p.step_seconds,
                                 [](double t, const auto& row) { return t < row.second.step_seconds; });
      plan.ranked.insert(at, {queue[i].request, std::move(p)});
      if (plan.ranked.size() > s.top) plan.ranked.pop_back();
    } catch (const Error& e) {
      refuse(e);
    }
  }
  plan.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  PF_CHECK_ARG(plan.candidates > plan.refused, "no configuration of ", gpus, " GPUs can run this model (",
               plan.first_refusal.empty() ? "no T divides the heads within a node, or no batch split" : plan.first_refusal,
               ")");
  return plan;
}

std::string cluster_plan_table(const ClusterPlan& plan, size_t rows) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%4s %4s %4s %5s %-17s %2s %2s %5s %-9s %2s %10s %8s %6s %7s %9s\n", "rank", "T", "P",
                "D", "schedule", "v", "b", "m", "recompute", "sp", "step s", "TFLOP/s", "MFU", "bubble", "GiB/GPU");
  out << line;
  for (size_t i = 0; i < plan.ranked.size() && i < rows; ++i) {
    const auto& [r, p] = plan.ranked[i];
    std::snprintf(line, sizeof line, "%4zu %4d %4d %5d %-17s %2d %2lld %5d %-9s %2s %10.3f %8.1f %5.1f%% %6.1f%% %9.1f\n",
                  i + 1, r.grid.tensor, r.grid.pipeline, r.grid.data, p.schedule.c_str(), p.chunks,
                  static_cast<long long>(r.micro_batch), p.micro_batches, recompute_name(r.recompute),
                  r.sequence_parallel ? "y" : "-", p.step_seconds, p.tflops_per_gpu, 100 * p.model_flops_utilization,
                  100 * p.bubble_rate, p.memory_per_gpu_bytes / kGiB);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "search: %lld candidates, %lld simulated, %lld pruned by their lower bound, %lld too big, %lld refused; "
                "%.2f s\n",
                static_cast<long long>(plan.candidates), static_cast<long long>(plan.simulated),
                static_cast<long long>(plan.pruned), static_cast<long long>(plan.too_big),
                static_cast<long long>(plan.refused), plan.seconds);
  out << line;
  if (plan.ranked.empty()) out << "nothing fits in the GPUs' memory\n";
  return out.str();
}

nlohmann::json cluster_plan_to_json(const ClusterSearch& s, const ClusterPlan& plan) {
  nlohmann::json ranked = nlohmann::json::array();
  for (const auto& [r, p] : plan.ranked) {
    nlohmann::json row = prediction_to_json(r, p);
    row.erase("stage_costs");
    ranked.push_back(row);
  }
  return {{"format", "pipeforge.cluster_plan/1"},
          {"cluster",
           {{"system", gpu_system_to_json(s.cluster.system)},
            {"nodes", s.cluster.nodes},
            {"gpus", s.cluster.gpus()},
            {"slowest_gpu_speed", s.cluster.slowest_gpu_speed}}},
          {"search",
           {{"candidates", plan.candidates},
            {"simulated", plan.simulated},
            {"pruned", plan.pruned},
            {"too_big", plan.too_big},
            {"refused", plan.refused},
            {"first_refusal", plan.first_refusal},
            {"seconds", plan.seconds}}},
          {"ranked", ranked}};
}

std::string cluster_plan_svg(const ClusterPlan& plan, const std::string& title) {
  const double width = 900, height = 460, left = 80, right = 30, top = 50, bottom = 60;
  double max_mem = 0, max_t = 0, min_t = 1e300, usable = 0;
  for (const auto& [r, p] : plan.ranked) {
    max_mem = std::max(max_mem, p.memory_per_gpu_bytes / kGiB);
    max_t = std::max(max_t, p.step_seconds);
    min_t = std::min(min_t, p.step_seconds);
    usable = p.usable_memory_bytes / kGiB;
  }
  max_mem = std::max(max_mem, usable) * 1.05;
  if (plan.ranked.empty()) max_t = min_t = 1;
  const double t_lo = min_t * 0.95, t_hi = std::max(max_t * 1.05, t_lo * 1.01);
  auto x = [&](double gib) { return left + gib / max_mem * (width - left - right); };
  auto y = [&](double t) { return height - bottom - (t - t_lo) / (t_hi - t_lo) * (height - top - bottom); };
  auto esc = [](const std::string& text) {
    std::string o;
    for (char ch : text) o += ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '&' ? "&amp;" : std::string(1, ch);
    return o;
  };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << left << "\" y=\"24\" font-size=\"14\">" << esc(title) << "</text>\n";
  o << "<line x1=\"" << left << "\" y1=\"" << height - bottom << "\" x2=\"" << width - right << "\" y2=\""
    << height - bottom << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
    << "\" y2=\"" << height - bottom << "\" stroke=\"black\"/>\n";
  // Ticks at 1, 2 or 5 times a power of ten, about five per axis.
  auto nice_step = [](double span) {
    const double raw = span / 5, p = std::pow(10.0, std::floor(std::log10(raw)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
  };
  const double gib_step = nice_step(max_mem), t_step = nice_step(t_hi - t_lo);
  for (double gib = 0; gib <= max_mem; gib += gib_step) {
    char a[32];
    std::snprintf(a, sizeof a, "%g", gib);
    o << "<text x=\"" << x(gib) << "\" y=\"" << height - bottom + 18 << "\" text-anchor=\"middle\">" << a << "</text>\n";
  }
  for (double t = std::ceil(t_lo / t_step) * t_step; t <= t_hi; t += t_step) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", t);
    o << "<text x=\"" << left - 8 << "\" y=\"" << y(t) + 4 << "\" text-anchor=\"end\">" << b << "</text>\n";
  }
  o << "<text x=\"" << (left + width - right) / 2 << "\" y=\"" << height - 18
    << "\" text-anchor=\"middle\">memory per GPU (GiB)</text>\n";
  o << "<text transform=\"translate(20," << (top + height - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">step time (s)</text>\n";
  if (usable > 0)
    o << "<line x1=\"" << x(usable) << "\" y1=\"" << top << "\" x2=\"" << x(usable) << "\" y2=\"" << height - bottom
      << "\" stroke=\"#c33\" stroke-dasharray=\"5,4\"/>\n<text x=\"" << x(usable) - 4 << "\" y=\"" << top + 12
      << "\" text-anchor=\"end\" fill=\"#c33\">usable memory</text>\n";
  for (size_t i = plan.ranked.size(); i-- > 0;) {
    const auto& [r, p] = plan.ranked[i];
    const double cx = x(p.memory_per_gpu_bytes / kGiB), cy = y(p.step_seconds);
    o << "<circle cx=\"" << cx << "\" cy=\"" << cy << "\" r=\"" << (i == 0 ? 7 : 4) << "\" fill=\""
      << (i == 0 ? "#2a7" : "#47a") << "\" fill-opacity=\"0.8\"><title>" << esc(describe(r, p)) << "</title></circle>\n";
    if (i == 0)
      o << "<text x=\"" << cx + 10 << "\" y=\"" << cy + 4 << "\">choice: " << esc(describe(r, p)) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace pf::gpu
