#include "runtime/gpu_model/gpu_system.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_object.h"
#include "runtime/core/suggest.h"
#include "runtime/gpu_model/presets.h"

namespace pf::gpu {
namespace {

double number_in(const JsonObject& o, const std::string& key, double lo, double hi, bool open_low) {
  PF_CHECK_ARG(o.has(key), o.path_of(key), ": missing");
  const nlohmann::json& v = o.get(key);
  PF_CHECK_ARG(v.is_number(), o.path_of(key), ": expected a number, got ", v.type_name());
  const double x = v.get<double>();
  PF_CHECK_ARG(std::isfinite(x) && (open_low ? x > lo : x >= lo) && x <= hi, o.path_of(key), ": ", x,
               " is not in ", open_low ? "(" : "[", lo, ", ", hi, "]");
  return x;
}

double positive(const JsonObject& o, const std::string& key, double hi) { return number_in(o, key, 0, hi, true); }
double fraction(const JsonObject& o, const std::string& key) { return number_in(o, key, 0, 1, true); }
double non_negative(const JsonObject& o, const std::string& key, double hi) { return number_in(o, key, 0, hi, false); }

constexpr double kMiB = 1024.0 * 1024.0;

LinkSpec link_from(const JsonObject& o, const std::string& bandwidth_key, const std::string& efficiency_key,
                   const std::string& latency_key) {
  LinkSpec l;
  l.bandwidth = positive(o, bandwidth_key, 1e5) * 1e9;
  l.efficiency = fraction(o, efficiency_key);
  l.latency_s = non_negative(o, latency_key, 1e6) * 1e-6;
  return l;
}

}  // namespace

Precision parse_precision(const std::string& text, const std::string& what) {
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp16") return Precision::kFp16;
  fail(ErrorCode::kInvalidArgument, what, ": unknown precision '", text, "' (bf16 or fp16)");
}

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp16"; }

double GpuSpec::peak(Precision p) const {
  const auto it = peak_flops.find(precision_name(p));
  PF_CHECK_ARG(it != peak_flops.end(), "the GPU has no ", precision_name(p), " peak in its description");
  return it->second;
}

GpuSystem gpu_system_from_json(const nlohmann::json& value, const std::string& where) {
  try {
    JsonObject top(value, "");
    GpuSystem s;
    s.name = top.get_string("name");
    PF_CHECK_ARG(!s.name.empty() && s.name.size() <= 64, top.path_of("name"), ": 1 to 64 characters");
    s.description = top.get_string("description", "");
    {
      JsonObject g(top.get("gpu"), top.path_of("gpu"));
      JsonObject peaks(g.get("peak_tflops"), g.path_of("peak_tflops"));
      for (const char* p : {"bf16", "fp16"})
        if (peaks.has(p)) s.gpu.peak_flops[p] = positive(peaks, p, 1e6) * 1e12;
      peaks.reject_unknown();
      PF_CHECK_ARG(!s.gpu.peak_flops.empty(), g.path_of("peak_tflops"), ": needs bf16 or fp16");
      s.gpu.sms = static_cast<int>(g.get_int_in("sms", 1, 100000));
      s.gpu.memory_bytes = static_cast<int64_t>(positive(g, "memory_mib", 1e9) * kMiB);
      s.gpu.memory_bandwidth = positive(g, "memory_gb_per_s", 1e6) * 1e9;
      s.gpu.gemm_efficiency = fraction(g, "gemm_efficiency");
      s.gpu.gemm_k_overhead = non_negative(g, "gemm_k_overhead", 1e6);
      s.gpu.flash_attention_efficiency = fraction(g, "flash_attention_efficiency");
      s.gpu.memory_efficiency = fraction(g, "memory_efficiency");
      s.gpu.kernel_overhead_s = non_negative(g, "kernel_overhead_us", 1e6) * 1e-6;
      g.reject_unknown();
    }
    {
      JsonObject n(top.get("node"), top.path_of("node"));
      s.gpus_per_node = static_cast<int>(n.get_int_in("gpus", 1, 1 << 20));
      s.nvlink = link_from(n, "nvlink_gb_per_s", "nvlink_efficiency", "nvlink_latency_us");
      n.reject_unknown();
    }
    {
      JsonObject n(top.get("network"), top.path_of("network"));
      s.network = link_from(n, "gb_per_s_per_gpu", "efficiency", "latency_us");
      n.reject_unknown();
    }
    s.reserved_bytes = static_cast<int64_t>(non_negative(top, "reserved_mib", 1e9) * kMiB);
    PF_CHECK_ARG(s.reserved_bytes < s.gpu.memory_bytes, top.path_of("reserved_mib"),
                 ": not below the GPU's memory_mib");
    top.reject_unknown();
    return s;
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
}

nlohmann::json gpu_system_to_json(const GpuSystem& s) {
  nlohmann::json peaks = nlohmann::json::object();
  for (const auto& [name, flops] : s.gpu.peak_flops) peaks[name] = flops / 1e12;
  return {{"name", s.name},
          {"description", s.description},
          {"gpu",
           {{"peak_tflops", peaks},
            {"sms", s.gpu.sms},
            {"memory_mib", static_cast<double>(s.gpu.memory_bytes) / kMiB},
            {"memory_gb_per_s", s.gpu.memory_bandwidth / 1e9},
            {"gemm_efficiency", s.gpu.gemm_efficiency},
            {"gemm_k_overhead", s.gpu.gemm_k_overhead},
            {"flash_attention_efficiency", s.gpu.flash_attention_efficiency},
            {"memory_efficiency", s.gpu.memory_efficiency},
            {"kernel_overhead_us", s.gpu.kernel_overhead_s * 1e6}}},
          {"node",
           {{"gpus", s.gpus_per_node},
            {"nvlink_gb_per_s", s.nvlink.bandwidth / 1e9},
            {"nvlink_efficiency", s.nvlink.efficiency},
            {"nvlink_latency_us", s.nvlink.latency_s * 1e6}}},
          {"network",
           {{"gb_per_s_per_gpu", s.network.bandwidth / 1e9},
            {"efficiency", s.network.efficiency},
            {"latency_us", s.network.latency_s * 1e6}}},
          {"reserved_mib", static_cast<double>(s.reserved_bytes) / kMiB}};
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const PresetText& p : preset_texts()) names.push_back(p.name);
  return names;
}

GpuSystem gpu_preset(const std::string& name) {
  for (const PresetText& p : preset_texts())
    if (name == p.name) return gpu_system_from_json(nlohmann::json::parse(p.json), std::string("preset ") + p.name);
  std::string list;
  for (const std::string& n : gpu_preset_names()) list += (list.empty() ? "" : ", ") + n;
  fail(ErrorCode::kInvalidArgument, "unknown GPU '", name, "'", did_you_mean(name, gpu_preset_names()), " (presets: ", list,
               "; or a JSON file in their format)");
}

}  // namespace pf::gpu
