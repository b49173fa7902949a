// A GPU machine type for the cluster model (docs/PREDICT.md): one GPU's peaks and memory, the node
// it sits in (GPUs per node, NVLink) and the network between nodes (InfiniBand per GPU), plus the
// few efficiency constants of the operator and collective model — one set per GPU type, never
// fitted per configuration. Shipped as JSON presets (runtime/gpu_model/presets/*.json, compiled
// in); a user file in the same format replaces a preset. Read strictly: an unknown field or a bad
// value is an error naming its JSON path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pf::gpu {

enum class Precision { kBf16, kFp16 };
// "bf16" / "fp16"; kInvalidArgument naming `what` otherwise.
Precision parse_precision(const std::string& text, const std::string& what);
const char* precision_name(Precision p);

struct GpuSpec {
  std::map<std::string, double> peak_flops;  // dense tensor-core FLOP/s by precision name
  int sms = 1;                               // streaming multiprocessors: one GEMM tile each per wave
  int64_t memory_bytes = 0;
  double memory_bandwidth = 0;               // HBM bytes/s
  double gemm_efficiency = 1;                // of peak, for a large GEMM in whole waves
  double gemm_k_overhead = 0;                // a tile's prologue and epilogue, in elements of K
  double flash_attention_efficiency = 1;     // of peak, a fused (flash) attention kernel
  double memory_efficiency = 1;              // of HBM bandwidth, a streaming kernel
  double kernel_overhead_s = 0;              // launch and tail, per kernel

  double peak(Precision p) const;  // kInvalidArgument when the preset has no such precision
};

struct LinkSpec {
  double bandwidth = 0;   // bytes/s per GPU, one direction
  double efficiency = 1;  // of `bandwidth`, what a large collective's ring achieves (bus bandwidth)
  double latency_s = 0;   // per ring step / message
  double effective() const { return bandwidth * efficiency; }
};

struct GpuSystem {
  std::string name;
  std::string description;
  GpuSpec gpu;
  int gpus_per_node = 1;
  LinkSpec nvlink;    // inside a node
  LinkSpec network;   // between nodes, per GPU
  int64_t reserved_bytes = 0;  // per GPU: CUDA context, communicator buffers, fragmentation

  int64_t usable_memory_bytes() const { return gpu.memory_bytes - reserved_bytes; }
};

// kInvalidArgument naming `where` and the JSON path of the first bad or unknown field.
GpuSystem gpu_system_from_json(const nlohmann::json& value, const std::string& where);
nlohmann::json gpu_system_to_json(const GpuSystem& system);

// The shipped presets, by name ("a100-40gb", "a100-80gb", "h100-sxm", "h200").
std::vector<std::string> gpu_preset_names();
// kInvalidArgument naming the known presets when there is none by that name.
GpuSystem gpu_preset(const std::string& name);

}  // namespace pf::gpu
