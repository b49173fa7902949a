// The reductions used by every kernel that sums (LayerNorm, softmax, cross-entropy, bias and
// LayerNorm weight gradients). Included by .cu files only.
//
// Determinism: every reduction here has a summation order that depends only on the launch shape
// (blockDim), never on timing: no atomics, no data-dependent order. So a kernel launched with the
// same shape on the same inputs gives bitwise the same result every run. The order differs from
// the CPU's sequential loops, which is why reductions get their own (looser) tolerances.
#pragma once

#include <cuda_runtime.h>

namespace pf::cuda::detail {

constexpr int kWarp = 32;

struct SumOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  template <typename V>
  __device__ __forceinline__ V operator()(V a, V b) const { return a > b ? a : b; }
};

// Butterfly (xor) reduction inside a warp: after it every lane holds the same value, combined in
// the same fixed pairing order.
template <typename V, typename Op>
__device__ __forceinline__ V warp_reduce(V value, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Reduces one value per thread over the whole (1-D) block and returns the result to EVERY thread.
// Requirements: blockDim.x is a multiple of 32 and <= 1024; every thread of the block calls it (it
// contains __syncthreads); `identity` is the neutral element (0 for sums, -inf for max).
// Order: each warp reduces its 32 values (butterfly), warp results land in shared memory in warp
// order, then warp 0 reduces those (lanes past the warp count contribute `identity`).
// The shared buffer is reused by consecutive calls; the leading __syncthreads protects it.
template <typename V, typename Op>
__device__ V block_reduce(V value, Op op, V identity) {
  __shared__ V warp_results[kWarp];
  __shared__ V result;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  value = warp_reduce(value, op);
  __syncthreads();  // a previous call may still be reading warp_results / result
  if (lane == 0) warp_results[warp] = value;
  __syncthreads();
  if (warp == 0) {
    V v = lane < warps ? warp_results[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  return result;
}

template <typename V>
__device__ __forceinline__ V block_sum(V value) { return block_reduce(value, SumOp(), V(0)); }
__device__ __forceinline__ float block_max(float value) {
  return block_reduce(value, MaxOp(), -INFINITY);
}

// Column sums of a [rows, cols] matrix: out[c] += sum_r f(r, c) for kTerms values per element
// (bias gradient: 1 term; LayerNorm weight gradients: 2 terms), with NO atomics and no workspace.
// Launch: grid.x = ceil(cols / kColTile), block = (kColTile, kRowLanes). Thread (tx, ty) owns
// column c = blockIdx.x * kColTile + tx and sums rows ty, ty + kRowLanes, ... in increasing order;
// then the kRowLanes partial sums are added in lane order 0, 1, ... by thread ty == 0, which adds
// the total to out[c] (one += per column, like the CPU's accumulation into the gradient).
constexpr int kColTile = 32;
constexpr int kRowLanes = 16;

template <int kTerms>
struct ColumnOutputs {
  float* out[kTerms];  // device pointers, each [cols]
};

template <int kTerms, typename Fn>
__global__ void column_sum_kernel(int64_t rows, int64_t cols, Fn f, ColumnOutputs<kTerms> outputs) {
  __shared__ float partial[kTerms][kRowLanes][kColTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + tx;
  float acc[kTerms];
#pragma unroll
  for (int t = 0; t < kTerms; ++t) acc[t] = 0.0f;
  if (c < cols) {
    for (int64_t r = ty; r < rows; r += kRowLanes) {
      float v[kTerms];
      f(r, c, v);
#pragma unroll
      for (int t = 0; t < kTerms; ++t) acc[t] += v[t];
    }
  }
#pragma unroll
  for (int t = 0; t < kTerms; ++t) partial[t][ty][tx] = acc[t];
  __syncthreads();
  if (ty == 0 && c < cols) {
#pragma unroll
    for (int t = 0; t < kTerms; ++t) {
      float total = 0.0f;
      for (int l = 0; l < kRowLanes; ++l) total += partial[t][l][tx];
      outputs.out[t][c] += total;
    }
  }
}

// Grid-stride loop helpers for elementwise kernels.
inline unsigned elementwise_blocks(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = 65535LL * 16;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

}  // namespace pf::cuda::detail
