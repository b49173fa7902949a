// Seconds of one GPU kernel from its shape (docs/PREDICT.md, "Operators"), by a roofline:
//  * a GEMM (batch x [M, K] x [K, N]) takes the longer of its FLOPs at the GPU's peak x
//    gemm_efficiency x wave efficiency x K / (K + gemm_k_overhead) and its operands' bytes at the HBM bandwidth x
//    memory_efficiency, plus one kernel overhead. The wave efficiency is the tile and wave
//    quantisation of a tiled GEMM: output tiles of kTileM x kTileN, one per SM per wave, so
//    tiles / (waves x SMs) of the last wave's slots do work; and each tile's fixed prologue and
//    epilogue cost as much as gemm_k_overhead more of the inner dimension K;
//  * a streaming (element-wise, norm, softmax, optimizer) kernel moves its bytes at the HBM
//    bandwidth x memory_efficiency, plus one kernel overhead;
//  * a fused (flash) attention kernel does its FLOPs at peak x flash_attention_efficiency.
#pragma once

#include <cstdint>

#include "runtime/gpu_model/gpu_system.h"

namespace pf::gpu {

inline constexpr int64_t kTileM = 128;
inline constexpr int64_t kTileN = 128;

// Fraction of the SMs' slots a GEMM with `tiles` output tiles keeps busy over its waves, in (0, 1].
double wave_efficiency(double tiles, int sms);

// batch independent products of [m, k] x [k, n], `bytes_per_element` per operand element.
double gemm_seconds(const GpuSpec& gpu, Precision precision, double m, double n, double k, double batch = 1,
                    double bytes_per_element = 2);

// A kernel that reads and writes `bytes` in all.
double streaming_seconds(const GpuSpec& gpu, double bytes);

// Fused attention over `batch_heads` heads of `seq` queries and keys of head size `head_dim`,
// causal (half the score matrix computed); `backward`: its backward (2.5 x the forward's FLOPs: the
// recomputed scores and four products).
double flash_attention_seconds(const GpuSpec& gpu, Precision precision, double batch_heads, double seq,
                               double head_dim, bool backward);

}  // namespace pf::gpu
