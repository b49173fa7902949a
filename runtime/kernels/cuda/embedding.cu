#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/embedding.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_forward_kernel(int64_t n, int64_t steps, int64_t dim, int64_t vocab,
                                         const int32_t* ids, const T* tok, const T* pos, T* y) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / dim, c = i % dim;
    const int32_t id = ids[r];
    float v = NAN;
    if ((id >= 0 && id < vocab) || id == kIdNotHeld) {
      v = id == kIdNotHeld ? 0.0f : to_f32(tok[static_cast<int64_t>(id) * dim + c]);
      if (pos != nullptr) v += to_f32(pos[(r % steps) * dim + c]);  // no positions: the token row itself
    }
    y[i] = from_f32<T>(v);
  }
}

// sorted[p] = r where p = #{rows with a smaller id} + #{earlier rows with the same id}: a stable
// counting sort by id. Each block stages tiles of ids in shared memory; integer counts only, so the
// result is exact and deterministic.
__global__ void stable_sort_rows_kernel(int64_t rows, const int32_t* ids, int32_t* sorted) {
  __shared__ int32_t tile[kThreads];
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int32_t id = r < rows ? ids[r] : 0;
  int64_t position = 0;
  for (int64_t base = 0; base < rows; base += kThreads) {
    const int64_t j = base + threadIdx.x;
    tile[threadIdx.x] = j < rows ? ids[j] : 0;
    __syncthreads();
    const int64_t count = rows - base < kThreads ? rows - base : kThreads;
    for (int64_t k = 0; k < count; ++k) {
      const int32_t other = tile[k];
      position += (other < id) || (other == id && base + k < r);
    }
    __syncthreads();
  }
  if (r < rows) sorted[position] = static_cast<int32_t>(r);
}

// Block (i, column tile): if sorted position i starts a run of equal ids, add that run's rows (in
// increasing row order) into dtoken[id, c], starting from its current value.
template <typename T>
__global__ void token_grad_kernel(int64_t rows, int64_t dim, int64_t vocab, const int32_t* ids,
                                  const int32_t* sorted, const T* dy, float* dtoken) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[sorted[i]];
  if (i > 0 && ids[sorted[i - 1]] == id) return;  // not the start of a run
  if (id < 0 || id >= vocab) return;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= dim) return;
  float acc = dtoken[static_cast<int64_t>(id) * dim + c];
  for (int64_t j = i; j < rows; ++j) {
    const int32_t r = sorted[j];
    if (ids[r] != id) break;
    acc += to_f32(dy[static_cast<int64_t>(r) * dim + c]);
  }
  dtoken[static_cast<int64_t>(id) * dim + c] = acc;
}

// One thread per (t, c): dposition[t, c] += dy[b, t, c] for b = 0, 1, ... in order.
template <typename T>
__global__ void position_grad_kernel(int64_t batch, int64_t steps, int64_t dim, const int32_t* ids,
                                     int64_t vocab, const T* dy, float* dposition) {
  const int64_t n = steps * dim;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t t = i / dim;
    float acc = dposition[i];
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t id = ids[b * steps + t];
      if ((id >= 0 && id < vocab) || id == kIdNotHeld) acc += to_f32(dy[(b * steps) * dim + i]);
    }
    dposition[i] = acc;
  }
}

}  // namespace

template <typename T>
void embedding_forward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, int64_t vocab,
                       const int32_t* ids, const T* token_weight, const T* position_weight, T* y) {
  const int64_t n = batch * steps * dim;
  if (n <= 0) return;
  embedding_forward_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      n, steps, dim, vocab, ids, token_weight, position_weight, y);
  PF_CHECK_LAUNCH("embedding_forward");
}

size_t embedding_backward_workspace_bytes(int64_t batch, int64_t steps) {
  return static_cast<size_t>(batch * steps) * sizeof(int32_t);
}

template <typename T>
void embedding_backward_weight(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim,
                               int64_t vocab, const int32_t* ids, const T* dy, float* dtoken,
                               float* dposition, void* workspace) {
  const int64_t rows = batch * steps;
  if (rows <= 0 || dim <= 0) return;
  int32_t* sorted = static_cast<int32_t*>(workspace);
  const unsigned sort_blocks = static_cast<unsigned>((rows + kThreads - 1) / kThreads);
  stable_sort_rows_kernel<<<sort_blocks, kThreads, 0, stream>>>(rows, ids, sorted);
  PF_CHECK_LAUNCH("embedding_backward_weight (sort)");
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((dim + kThreads - 1) / kThreads));
  token_grad_kernel<T><<<grid, kThreads, 0, stream>>>(rows, dim, vocab, ids, sorted, dy, dtoken);
  PF_CHECK_LAUNCH("embedding_backward_weight (token)");
  const int64_t n = steps * dim;
  if (dposition == nullptr) return;  // an embedding without learned positions
  position_grad_kernel<T><<<detail::elementwise_blocks(n, kThreads), kThreads, 0, stream>>>(
      batch, steps, dim, ids, vocab, dy, dposition);
  PF_CHECK_LAUNCH("embedding_backward_weight (position)");
}

#define PF_INSTANTIATE(T)                                                                        \
  template void embedding_forward<T>(cudaStream_t, int64_t, int64_t, int64_t, int64_t,           \
                                     const int32_t*, const T*, const T*, T*);                    \
  template void embedding_backward_weight<T>(cudaStream_t, int64_t, int64_t, int64_t, int64_t,   \
                                             const int32_t*, const T*, float*, float*, void*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
