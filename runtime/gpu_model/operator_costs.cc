#include "runtime/gpu_model/operator_costs.h"

#include <algorithm>
#include <cmath>

namespace pf::gpu {

double wave_efficiency(double tiles, int sms) {
  if (tiles <= 0) return 1;
  const double waves = std::ceil(tiles / sms);
  return tiles / (waves * sms);
}

double gemm_seconds(const GpuSpec& gpu, Precision precision, double m, double n, double k, double batch,
                    double bytes_per_element) {
  const double flops = 2 * m * n * k * batch;
  const double tiles = std::ceil(m / kTileM) * std::ceil(n / kTileN) * batch;
  // Each output tile runs K / 32 main-loop steps plus a fixed prologue and epilogue, worth
  // gemm_k_overhead of K: a GEMM with a short inner dimension spends more of its time on them.
  const double k_efficiency = k / (k + gpu.gemm_k_overhead);
  const double compute =
      flops / (gpu.peak(precision) * gpu.gemm_efficiency * wave_efficiency(tiles, gpu.sms) * k_efficiency);
  const double bytes = (m * k + k * n + m * n) * batch * bytes_per_element;
  const double memory = bytes / (gpu.memory_bandwidth * gpu.memory_efficiency);
  return std::max(compute, memory) + gpu.kernel_overhead_s;
}

double streaming_seconds(const GpuSpec& gpu, double bytes) {
  return bytes / (gpu.memory_bandwidth * gpu.memory_efficiency) + gpu.kernel_overhead_s;
}

double flash_attention_seconds(const GpuSpec& gpu, Precision precision, double batch_heads, double seq,
                               double head_dim, bool backward) {
  // Forward: QK^T and PV, 2 x 2 x seq^2 x head_dim per head, half of it under the causal mask.
  const double forward_flops = 4 * seq * seq * head_dim * batch_heads * 0.5;
  const double flops = backward ? 2.5 * forward_flops : forward_flops;
  return flops / (gpu.peak(precision) * gpu.flash_attention_efficiency) + gpu.kernel_overhead_s;
}

}  // namespace pf::gpu
