#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/element_ops.h"
#include "runtime/kernels/cuda/patch_embedding.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;

// The image offset of element `col` of patch row `row` (b * N + i).
__device__ __forceinline__ int64_t patch_source(const PatchShape& s, int64_t row, int64_t col) {
  const int64_t n = s.patches(), across = s.width / s.patch, p = s.patch;
  const int64_t b = row / n, i = row % n;
  const int64_t top = (i / across) * p, left = (i % across) * p;
  const int64_t x = col % p, y = (col / p) % p, ch = col / (p * p);
  return ((b * s.channels + ch) * s.height + top + y) * s.width + left + x;
}

template <typename T>
__global__ void gather_patches_kernel(PatchShape s, const T* __restrict__ images, T* __restrict__ patches) {
  const int64_t k = s.patch_size(), total = s.batch * s.patches() * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    patches[i] = images[patch_source(s, i / k, i % k)];
}

template <typename T>
__global__ void scatter_patches_kernel(PatchShape s, const T* __restrict__ patches, T* __restrict__ images) {
  const int64_t k = s.patch_size(), total = s.batch * s.patches() * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    images[patch_source(s, i / k, i % k)] = patches[i];
}

template <typename T>
__global__ void assemble_kernel(PatchShape s, const T* __restrict__ projected, const T* __restrict__ cls,
                                const T* __restrict__ positions, T* __restrict__ tokens) {
  const int64_t n = s.patches(), d = s.dim, total = s.batch * (1 + n) * d;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % d, t = (i / d) % (1 + n), b = i / (d * (1 + n));
    const float value = t == 0 ? to_f32(cls[c]) : to_f32(projected[(b * n + t - 1) * d + c]);
    tokens[i] = from_f32<T>(value + to_f32(positions[t * d + c]));
  }
}

template <typename T>
__global__ void patch_token_rows_kernel(PatchShape s, const T* __restrict__ grad, T* __restrict__ rows) {
  const int64_t n = s.patches(), d = s.dim, total = s.batch * n * d;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % d, r = i / d;  // r = b * n + t
    rows[i] = grad[((r / n) * (1 + n) + 1 + r % n) * d + c];
  }
}

template <typename T>
struct FirstTokenTerms {
  const T* grad;
  int64_t row_stride;  // steps * dim
  __device__ void operator()(int64_t b, int64_t c, float (&v)[1]) const { v[0] = to_f32(grad[b * row_stride + c]); }
};

template <typename T>
__global__ void first_token_forward_kernel(int64_t batch, int64_t steps, int64_t dim, const T* __restrict__ x,
                                           T* __restrict__ y) {
  const int64_t total = batch * dim, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] = x[(i / dim) * steps * dim + i % dim];
}

template <typename T>
__global__ void first_token_backward_kernel(int64_t batch, int64_t steps, int64_t dim, const T* __restrict__ dy,
                                            T* __restrict__ dx) {
  const int64_t total = batch * steps * dim, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = i % dim, t = (i / dim) % steps, b = i / (dim * steps);
    dx[i] = t == 0 ? dy[b * dim + c] : from_f32<T>(0.0f);
  }
}

}  // namespace

#define PF_LAUNCH(kernel, total, ...)                                                                 \
  do {                                                                                                \
    if ((total) <= 0) return;                                                                         \
    kernel<T><<<detail::elementwise_blocks((total), kThreads), kThreads, 0, stream>>>(__VA_ARGS__);  \
    PF_CHECK_LAUNCH(#kernel);                                                                         \
  } while (0)

template <typename T>
void gather_patches(cudaStream_t stream, const PatchShape& s, const T* images, T* patches) {
  PF_LAUNCH(gather_patches_kernel, s.batch * s.patches() * s.patch_size(), s, images, patches);
}

template <typename T>
void scatter_patches(cudaStream_t stream, const PatchShape& s, const T* patches, T* images) {
  PF_LAUNCH(scatter_patches_kernel, s.batch * s.patches() * s.patch_size(), s, patches, images);
}

template <typename T>
void assemble_patch_tokens(cudaStream_t stream, const PatchShape& s, const T* projected, const T* cls,
                           const T* positions, T* tokens) {
  PF_LAUNCH(assemble_kernel, s.batch * (1 + s.patches()) * s.dim, s, projected, cls, positions, tokens);
}

template <typename T>
void patch_token_rows(cudaStream_t stream, const PatchShape& s, const T* grad, T* rows) {
  PF_LAUNCH(patch_token_rows_kernel, s.batch * s.patches() * s.dim, s, grad, rows);
}

template <typename T>
void class_token_grad(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* grad, float* dcls) {
  if (batch <= 0 || dim <= 0) return;
  const dim3 block(detail::kColTile, detail::kRowLanes);
  const unsigned grid = static_cast<unsigned>((dim + detail::kColTile - 1) / detail::kColTile);
  detail::ColumnOutputs<1> outputs{{dcls}};
  detail::column_sum_kernel<1><<<grid, block, 0, stream>>>(batch, dim, FirstTokenTerms<T>{grad, steps * dim}, outputs);
  PF_CHECK_LAUNCH("class_token_grad");
}

template <typename T>
void first_token_forward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* x, T* y) {
  PF_LAUNCH(first_token_forward_kernel, batch * dim, batch, steps, dim, x, y);
}

template <typename T>
void first_token_backward(cudaStream_t stream, int64_t batch, int64_t steps, int64_t dim, const T* dy, T* dx) {
  PF_LAUNCH(first_token_backward_kernel, batch * steps * dim, batch, steps, dim, dy, dx);
}

#undef PF_LAUNCH

#define PF_INSTANTIATE(T)                                                                                    \
  template void gather_patches<T>(cudaStream_t, const PatchShape&, const T*, T*);                            \
  template void scatter_patches<T>(cudaStream_t, const PatchShape&, const T*, T*);                           \
  template void assemble_patch_tokens<T>(cudaStream_t, const PatchShape&, const T*, const T*, const T*, T*); \
  template void patch_token_rows<T>(cudaStream_t, const PatchShape&, const T*, T*);                          \
  template void class_token_grad<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, float*);              \
  template void first_token_forward<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, T*);               \
  template void first_token_backward<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, T*);
PF_INSTANTIATE(float)
PF_INSTANTIATE(bf16)
#undef PF_INSTANTIATE

}  // namespace pf::cuda
