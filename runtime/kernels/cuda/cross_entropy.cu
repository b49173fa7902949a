#include <cuda_runtime.h>

#include "runtime/kernels/cuda/block_reduce.cuh"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/cross_entropy.h"
#include "runtime/kernels/cuda/element_ops.h"

namespace pf::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kSumThreads = 1024;

struct RowStats {
  float max;
  double sum_exp;
};

// Block-wide max (fp32) and sum of exp(x - max) (fp64) of one row; every thread gets the result.
template <typename T>
__device__ RowStats row_stats(const T* x, int64_t classes) {
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, to_f32(x[c]));
  const float row_max = detail::block_max(m);
  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) sum += cross_entropy_exp(to_f32(x[c]), row_max);
  return {row_max, detail::block_sum(sum)};
}

template <typename T>
__global__ void row_loss_kernel(int64_t classes, const T* logits, const int32_t* targets,
                                double* row_loss) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  const RowStats s = row_stats(x, classes);
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    row_loss[row] = (t >= 0 && t < classes) ? cross_entropy_row_loss(s.max, s.sum_exp, to_f32(x[t]))
                                            : static_cast<double>(NAN);
  }
}

// One block: fixed-order fp64 sum of the row losses.
__global__ void mean_loss_kernel(int64_t rows, const double* row_loss, float scale, float* loss) {
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  const double total = detail::block_sum(sum);
  if (threadIdx.x == 0) {
    loss[0] = static_cast<float>(static_cast<double>(scale) * total / static_cast<double>(rows));
  }
}

template <typename T>
__global__ void cross_entropy_backward_kernel(int64_t rows, int64_t classes, const T* logits,
                                              const int32_t* targets, float scale, T* grad) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  T* g = grad + row * classes;
  const RowStats s = row_stats(x, classes);
  const double inv_sum = 1.0 / s.sum_exp;
  const double coef = static_cast<double>(scale) / static_cast<double>(rows);
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < classes;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) {
    g[c] = from_f32<T>(valid ? cross_entropy_grad(to_f32(x[c]), s.max, inv_sum, c == t, coef) : NAN);
  }
}

template <typename T>
__global__ void logits_row_max_kernel(int64_t classes, const T* logits, float* maxima) {
  const T* x = logits + static_cast<int64_t>(blockIdx.x) * classes;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) m = fmaxf(m, to_f32(x[c]));
  const float row_max = detail::block_max(m);
  if (threadIdx.x == 0) maxima[blockIdx.x] = row_max;
}

template <typename T>
__global__ void vocab_sums_kernel(int64_t rows, int64_t classes, const T* logits, const int32_t* targets,
                                  int64_t first, const float* maxima, double* sums) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x) sum += cross_entropy_exp(to_f32(x[c]), maxima[row]);
  const double total = detail::block_sum(sum);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(targets[row]) - first;
    sums[row] = total;
    sums[rows + row] = t >= 0 && t < classes ? static_cast<double>(to_f32(x[t])) : 0.0;
  }
}

template <typename T>
__global__ void vocab_backward_kernel(int64_t classes, const T* logits, const int32_t* targets, int64_t first,
                                      const float* maxima, const double* inverse_sums, double coef, T* grad) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * classes;
  T* g = grad + row * classes;
  const int64_t t = static_cast<int64_t>(targets[row]) - first;
  for (int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    g[c] = from_f32<T>(cross_entropy_grad(to_f32(x[c]), maxima[row], inverse_sums[row], c == t, coef));
}

}  // namespace

template <typename T>
void logits_row_max(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits, float* maxima) {
  if (rows <= 0 || classes <= 0) return;
  logits_row_max_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(classes, logits, maxima);
  PF_CHECK_LAUNCH("logits_row_max");
}

template <typename T>
void vocab_cross_entropy_sums(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                              const int32_t* targets, int64_t first, const float* maxima, double* sums) {
  if (rows <= 0 || classes <= 0) return;
  vocab_sums_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(rows, classes, logits, targets, first,
                                                                               maxima, sums);
  PF_CHECK_LAUNCH("vocab_cross_entropy_sums");
}

template <typename T>
void vocab_cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                                  const int32_t* targets, int64_t first, const float* maxima,
                                  const double* inverse_sums, double coef, T* grad) {
  if (rows <= 0 || classes <= 0) return;
  vocab_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(classes, logits, targets, first,
                                                                                   maxima, inverse_sums, coef, grad);
  PF_CHECK_LAUNCH("vocab_cross_entropy_backward");
}

template <typename T>
void cross_entropy_forward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                           const int32_t* targets, float scale, double* row_loss, float* loss) {
  if (rows <= 0 || classes <= 0) return;
  row_loss_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(classes, logits, targets, row_loss);
  PF_CHECK_LAUNCH("cross_entropy_forward (rows)");
  mean_loss_kernel<<<1, kSumThreads, 0, stream>>>(rows, row_loss, scale, loss);
  PF_CHECK_LAUNCH("cross_entropy_forward (mean)");
}

template <typename T>
void cross_entropy_backward(cudaStream_t stream, int64_t rows, int64_t classes, const T* logits,
                            const int32_t* targets, float scale, T* grad) {
  if (rows <= 0 || classes <= 0) return;
  cross_entropy_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      rows, classes, logits, targets, scale, grad);
  PF_CHECK_LAUNCH("cross_entropy_backward");
}

template void cross_entropy_forward<float>(cudaStream_t, int64_t, int64_t, const float*, const int32_t*,
                                           float, double*, float*);
template void cross_entropy_forward<bf16>(cudaStream_t, int64_t, int64_t, const bf16*, const int32_t*,
                                          float, double*, float*);
template void cross_entropy_backward<float>(cudaStream_t, int64_t, int64_t, const float*, const int32_t*,
                                            float, float*);
template void cross_entropy_backward<bf16>(cudaStream_t, int64_t, int64_t, const bf16*, const int32_t*,
                                           float, bf16*);
template void logits_row_max<float>(cudaStream_t, int64_t, int64_t, const float*, float*);
template void vocab_cross_entropy_sums<float>(cudaStream_t, int64_t, int64_t, const float*, const int32_t*, int64_t,
                                              const float*, double*);
template void vocab_cross_entropy_backward<float>(cudaStream_t, int64_t, int64_t, const float*, const int32_t*,
                                                  int64_t, const float*, const double*, double, float*);

}  // namespace pf::cuda
